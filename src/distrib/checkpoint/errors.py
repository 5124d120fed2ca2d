"""What goes wrong with a checkpoint on disk: the error and warning classes (`distrib.checkpoint.files.storage` re-exports them).

They sit below every checkpoint module, so that the manifest parser, the
storage layer and the readers above raise the same classes without importing
each other.

Example:
    >>> try:
    ...     raise CheckpointNotFoundError("/ckpts/ckpt-9: no checkpoint here")
    ... except CorruptCheckpointError as e:   # old handlers catch it too
    ...     print(e)
    /ckpts/ckpt-9: no checkpoint here
"""
from __future__ import annotations

from distrib.errors import DistribError

__all__ = ["CorruptCheckpointError", "CheckpointNotFoundError", "CheckpointRestoreError", "CheckpointWarning",
           "UnsafeFileError"]


class CorruptCheckpointError(DistribError, RuntimeError):
    """A checkpoint directory is incomplete or its contents do not match its manifest."""


class CheckpointNotFoundError(CorruptCheckpointError, FileNotFoundError):
    """Nothing at all is at the checkpoint's path (a `CorruptCheckpointError` for old handlers)."""


class CheckpointWarning(UserWarning):
    """A damaged or incomplete checkpoint was skipped, or a restore was approximate."""


class UnsafeFileError(DistribError, ValueError):
    """A file that is not a safetensors state file (e.g. a pickle) was given to load."""


class CheckpointRestoreError(DistribError, RuntimeError):
    """A checkpoint's saved value could not be applied to a tracked object (`distrib.checkpoint.checkpoint`
    re-exports it): the value does not fit, or its declared dtype or shape disagrees with the object's."""
