"""``distrib.coordinator``: TensorFlow's ``tf.distribute.experimental.coordinator``.

A thin re-export: the coordinator lives with the rest of the parameter server in
`distrib.strategies.parameter_server.coordinator` (guide: docs/parameter-server.md).
`remote_function` registers a function that workers run by name
(``DISTRIB_PS_FUNCTIONS=registered``: `distrib.strategies.parameter_server.registered`).
"""
from distrib.strategies.parameter_server.coordinator import (CancelledError, ClusterCoordinator, PerWorkerDataset,
                                                             PerWorkerIterator, PerWorkerValues, RemoteValue,
                                                             UnavailableError)
from distrib.strategies.parameter_server.registered import RegisteredOnlyError, remote_function

__all__ = ["ClusterCoordinator", "RemoteValue", "PerWorkerValues", "PerWorkerDataset", "PerWorkerIterator",
           "UnavailableError", "CancelledError", "remote_function", "RegisteredOnlyError"]
