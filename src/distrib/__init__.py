"""distrib: TensorFlow's tf.distribute programming model on PyTorch.

Glossary (the words used in code and docs):

- **replica**: one copy of the model computing on one slice of each global
  batch. distrib runs one process per replica.
- **worker / task**: a process in the cluster, ``(task_type, task_id)`` with
  types ``chief``, ``worker``, ``ps``, ``evaluator``.
- **chief**: the task that writes checkpoints, summaries and progress: the
  ``chief`` task if the cluster has one, else ``worker`` 0.
- **global batch**: the examples of one synchronous step across all
  replicas; per-replica batch = global batch / ``num_replicas_in_sync``.
- **sync / async training**: all replicas step together (gradients summed)
  vs. workers updating parameters on parameter servers independently.

Example:
    >>> import distrib, torch
    >>> strategy = distrib.MultiWorkerMirroredStrategy()   # reads TF_CONFIG
    >>> with strategy.scope():
    ...     model = distrib.Model(torch.nn.Linear(4, 2))
    ...     model.compile(optimizer="sgd", loss="mse")
"""
from __future__ import annotations

import importlib
import os as _os
from typing import Any, Optional

__version__ = "0.1.0"

try:  # where the program started: re-launched local replicas start there too
    _START_DIRECTORY: Optional[str] = _os.getcwd()
except OSError:
    _START_DIRECTORY = None

# Everything loads on first use: `import distrib` (and so `distrib launch`) imports no torch.
_LAZY_ATTRS = {
    "DistribError": ("distrib.errors", "DistribError"),
    "ReduceOp": ("distrib.comm.collective", "ReduceOp"),
    "CommunicationImplementation": ("distrib.comm.options", "CommunicationImplementation"),
    "CommunicationOptions": ("distrib.comm.options", "CommunicationOptions"),
    "InputContext": ("distrib.data.distribution.input_context", "InputContext"),
    "InputOptions": ("distrib.data.distribution.input_options", "InputOptions"),
    "InputReplicationMode": ("distrib.data.distribution.input_options", "InputReplicationMode"),
    "Strategy": ("distrib.strategies.interface", "Strategy"),
    "get_replica_context": ("distrib.strategies.context", "get_replica_context"),
    "get_strategy": ("distrib.strategies.default", "get_strategy"),
    "has_strategy": ("distrib.strategies.context", "has_strategy"),
    "in_cross_replica_context": ("distrib.strategies.context", "in_cross_replica_context"),
    "DefaultStrategy": ("distrib.strategies.default", "DefaultStrategy"),
    "MultiWorkerMirroredStrategy": ("distrib.strategies.multi_worker", "MultiWorkerMirroredStrategy"),
    "OneDeviceStrategy": ("distrib.strategies.one_device", "OneDeviceStrategy"),
    "Model": ("distrib.training", "Model"),
    "SidecarEvaluator": ("distrib.training.sidecar", "SidecarEvaluator"),
    "MirroredStrategy": ("distrib.strategies.mirrored", "MirroredStrategy"),
    "ParameterServerStrategy": ("distrib.strategies.parameter_server", "ParameterServerStrategy"),
    "NcclAllReduce": ("distrib.strategies.cross_device_ops", "NcclAllReduce"),
    "HierarchicalCopyAllReduce": ("distrib.strategies.cross_device_ops", "HierarchicalCopyAllReduce"),
    "ReductionToOneDevice": ("distrib.strategies.cross_device_ops", "ReductionToOneDevice"),
    "TensorSpec": ("distrib.data.structure", "TensorSpec"),
}
_LAZY_MODULES = {"nn", "data", "datasets", "train", "callbacks", "models", "losses", "metrics", "optimizers",
                 "cluster", "launch", "testing", "experimental", "checkpoint", "coordinator", "plot",
                 "mixed_precision", "layers", "saved_model", "saving", "config", "image", "io"}

__all__ = [*sorted(_LAZY_ATTRS), *sorted(_LAZY_MODULES)]


def __dir__() -> "list[str]":
    # The public names and the module's dunders; not the helpers imported above.
    return sorted({*__all__, *(name for name in globals() if name.startswith("__") and name.endswith("__"))})


def __getattr__(name: str) -> Any:
    if name in _LAZY_ATTRS:
        module, attr = _LAZY_ATTRS[name]
        value = getattr(importlib.import_module(module), attr)
    elif name in _LAZY_MODULES:
        value = importlib.import_module(f"distrib.{name}")
    else:
        raise AttributeError(f"module 'distrib' has no attribute {name!r}")
    globals()[name] = value
    return value


def _install_hooks() -> None:
    from distrib import hooks

    if hooks.is_cluster_task():
        hooks.install_excepthook()


_install_hooks()
