"""``distrib.coordinator``: TensorFlow's ``tf.distribute.experimental.coordinator``.

A thin re-export: the coordinator lives with the rest of the parameter server in
`distrib.strategies.parameter_server.coordinator` (guide: docs/parameter-server.md).
"""
from distrib.strategies.parameter_server.coordinator import (CancelledError, ClusterCoordinator, PerWorkerDataset,
                                                             PerWorkerIterator, PerWorkerValues, RemoteValue,
                                                             UnavailableError)

__all__ = ["ClusterCoordinator", "RemoteValue", "PerWorkerValues", "PerWorkerDataset", "PerWorkerIterator",
           "UnavailableError", "CancelledError"]
