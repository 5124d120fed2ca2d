"""`CheckpointLoadStatus`: what a `Checkpoint.restore` matched (TF's status object).

Example:
    >>> status = ckpt.restore(path)
    >>> status.assert_consumed()        # every saved value used, every tracked object restored
"""
from __future__ import annotations

from typing import Any, List, Optional

__all__ = ["CheckpointLoadStatus"]


class CheckpointLoadStatus:
    """What a `Checkpoint.restore` matched; TF's status object.

    Attributes:
        path: the checkpoint restored (None when there was nothing to restore).
        missing: tracked names the checkpoint had no value for.
        unused: saved names no tracked object took.
    """

    def __init__(self, path: Optional[str], restored: List[str], missing: List[str], unused: List[str]) -> None:
        self.path = path
        self.restored = restored
        self.missing = missing
        self.unused = unused

    def assert_consumed(self) -> "CheckpointLoadStatus":
        """Raise AssertionError unless every saved value was used and every tracked object restored."""
        if self.path is None:
            raise AssertionError("no checkpoint was given (path=None); nothing was restored")
        if self.missing or self.unused:
            raise AssertionError(f"{self.path}: not an exact match: tracked but not in the checkpoint "
                                 f"{self.missing}, in the checkpoint but not tracked {self.unused}")
        return self

    def assert_existing_objects_matched(self) -> "CheckpointLoadStatus":
        """Raise AssertionError if a tracked object got no value (extra saved values are fine)."""
        if self.path is not None and self.missing:
            raise AssertionError(f"{self.path}: tracked objects not in the checkpoint: {self.missing}")
        return self

    def assert_nontrivial_match(self) -> "CheckpointLoadStatus":
        """Raise AssertionError if nothing at all was restored."""
        if not self.restored:
            raise AssertionError(f"{self.path}: nothing was restored")
        return self

    def expect_partial(self) -> "CheckpointLoadStatus":
        """Accept a partial match (TF uses this to silence warnings; nothing is warned here)."""
        return self

    def run_restore_ops(self, session: Any = None) -> None:
        """Nothing to run: values are applied eagerly by `Checkpoint.restore`."""

    def __repr__(self) -> str:
        return f"CheckpointLoadStatus(path={self.path!r}, missing={self.missing}, unused={self.unused})"
