"""`PendingRestore`: a restored state kept for an object that does not exist yet.

A checkpoint is often restored before the object a part of it belongs to is
made: a distributed dataset's iterator position before ``iter()``, ``fit``'s
data position before ``fit`` builds its input, metric states before the
metrics are built on the first batch. Each such owner keeps one
`PendingRestore`; the code that creates the object takes the state (once) and
loads it, and a checkpoint saved in between still holds the state (`peek`).

Example:
    >>> later = PendingRestore()
    >>> later.hold({"pos": 3})          # restored before the iterator exists
    >>> later.peek()                    # a save now still writes it
    {'pos': 3}
    >>> later.take()                    # the iterator is made: it loads this once
    {'pos': 3}
    >>> later.take() is None
    True
"""
from __future__ import annotations

from typing import Callable, Generic, Optional, TypeVar

__all__ = ["PendingRestore"]

T = TypeVar("T")


class PendingRestore(Generic[T]):
    """Holds one restored state until the object it belongs to takes it."""

    def __init__(self) -> None:
        self._state: Optional[T] = None

    def hold(self, state: Optional[T]) -> None:
        """Keep ``state`` for the next `take` (None: nothing waits)."""
        self._state = state

    def peek(self) -> Optional[T]:
        """The waiting state, left in place (None when nothing waits)."""
        return self._state

    def take(self) -> Optional[T]:
        """The waiting state, handed over once (None when nothing waits)."""
        state, self._state = self._state, None
        return state

    def apply(self, load: Callable[[T], None]) -> bool:
        """``load(state)`` with the waiting state, once; False when nothing waited."""
        state = self.take()
        if state is None:
            return False
        load(state)
        return True

    @property
    def waiting(self) -> bool:
        """True while a state waits."""
        return self._state is not None

    def __repr__(self) -> str:
        return f"PendingRestore({'waiting' if self.waiting else 'empty'})"
