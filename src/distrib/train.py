"""``distrib.train``: the ``tf.train`` checkpoint API on PyTorch objects.

Example (TensorFlow's multi-worker custom-loop tutorial, with no hand-written chief logic):
    >>> epoch = distrib.train.Variable(0, name="epoch")
    >>> step_in_epoch = distrib.train.Variable(0, name="step_in_epoch")
    >>> checkpoint = distrib.train.Checkpoint(model=model, optimizer=optimizer,
    ...                                       epoch=epoch, step_in_epoch=step_in_epoch)
    >>> manager = distrib.train.CheckpointManager(checkpoint, directory=checkpoint_dir, max_to_keep=1)
    >>> latest = distrib.train.latest_checkpoint(checkpoint_dir)
    >>> if latest:
    ...     checkpoint.restore(latest)
    >>> ...
    >>> manager.save()          # every worker calls it; only the chief's files land in checkpoint_dir
"""
from __future__ import annotations

from distrib.checkpoint.checkpoint import Checkpoint, CheckpointLoadStatus
from distrib.checkpoint.discovery import latest_checkpoint
from distrib.checkpoint.manager import CheckpointManager
from distrib.checkpoint.options import CheckpointOptions
from distrib.checkpoint.reader import CheckpointReader, load_checkpoint
from distrib.checkpoint.preemption_handler import PreemptionCheckpointHandler, TerminationConfig
from distrib.checkpoint.variable import Variable
from distrib.io.example_proto import (BytesList, Example, Feature, FeatureList, FeatureLists, Features, FloatList,
                                      Int64List, SequenceExample)
from distrib.utils.public_names import public_dir

__all__ = [
    "BytesList",
    "Checkpoint",
    "CheckpointLoadStatus",
    "CheckpointManager",
    "CheckpointOptions",
    "CheckpointReader",
    "Example",
    "Feature",
    "FeatureList",
    "FeatureLists",
    "Features",
    "FloatList",
    "Int64List",
    "PreemptionCheckpointHandler",
    "SequenceExample",
    "TerminationConfig",
    "Variable",
    "latest_checkpoint",
    "load_checkpoint",
]


def __dir__() -> "list[str]":
    return public_dir(globals(), __all__)


