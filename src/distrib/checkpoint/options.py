"""`CheckpointOptions`: how a checkpoint is saved (``tf.train.CheckpointOptions``).

``enable_async=True`` saves in the background: the state is copied at the
call (to the CPU, the only pause training sees), the call returns, and the
copy is written and published by a background thread while the next steps
run (see `distrib.checkpoint.files.background`). TensorFlow's older spelling
``experimental_enable_async_checkpoint`` means the same.

Example:
    >>> options = distrib.train.CheckpointOptions(enable_async=True)
    >>> manager.save(options=options)      # returns once the state is copied
    >>> manager.sync()                      # waits for the write (every worker, as save)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["CheckpointOptions"]


@dataclass(frozen=True)
class CheckpointOptions:
    """Options for `Checkpoint.save`/`write`, `CheckpointManager.save` and the saving callbacks.

    Args:
        experimental_io_device: accepted for TensorFlow compatibility; every
            task writes through its own filesystem, so it changes nothing.
        experimental_enable_async_checkpoint: TensorFlow's deprecated name for ``enable_async``.
        enable_async: write in the background (at most one save in flight).
    """

    experimental_io_device: Optional[str] = None
    experimental_enable_async_checkpoint: bool = False
    enable_async: bool = False

    @property
    def background(self) -> bool:
        """Whether a save with these options writes in the background."""
        return bool(self.enable_async or self.experimental_enable_async_checkpoint)

    @staticmethod
    def check(options: Any, who: str) -> "CheckpointOptions":
        """``options`` if it is a `CheckpointOptions` (None: the defaults); else one-line TypeError."""
        if options is None:
            return CheckpointOptions()
        if not isinstance(options, CheckpointOptions):
            raise TypeError(f"{who}: options must be a distrib.train.CheckpointOptions, got "
                            f"{type(options).__qualname__}")
        return options
