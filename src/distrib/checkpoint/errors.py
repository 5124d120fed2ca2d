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

__all__ = ["CorruptCheckpointError", "CheckpointNotFoundError", "CheckpointWarning", "UnsafeFileError"]


class CorruptCheckpointError(DistribError, RuntimeError):
    """A checkpoint directory is incomplete or its contents do not match its manifest."""


class CheckpointNotFoundError(CorruptCheckpointError, FileNotFoundError):
    """Nothing at all is at the checkpoint's path (a `CorruptCheckpointError` for old handlers)."""


class CheckpointWarning(UserWarning):
    """A damaged or incomplete checkpoint was skipped, or a restore was approximate."""


class UnsafeFileError(DistribError, ValueError):
    """A file that is not a safetensors state file (e.g. a pickle) was given to load."""
