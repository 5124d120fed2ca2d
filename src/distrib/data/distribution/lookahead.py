"""`Lookahead`: read a replica's feed some elements ahead, keeping the position of the first unread one.

A distributed iterator hands out one element per step. Reading ahead lets
the copy of the next batches to an accelerator (`distrib.data.distribution.device_stager`)
run while the current step computes; exact resume is kept by recording the
feed's position *before* each element read ahead: the iterator's position is
that of the first element not handed out yet, as if nothing had been read
past it. With ``depth`` 0 nothing is read before it is asked for and no
position is recorded (the feed's own is the iterator's).

Example (depth 2; the feed holds batches b0, b1, b2, b3):
    >>> ahead = Lookahead(feed, depth=2, prepare=stage)
    >>> ahead.next().element     # reads b0 (handed out), then b1 and b2 (their copies start)
    b0
    >>> ahead.state()            # the feed's position before b1: resuming here reads b1 next
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Optional

__all__ = ["Ahead", "Lookahead"]


@dataclass
class Ahead:
    """One element read from the feed, with what the feed said about it when it was read.

    Attributes:
        element: None at the end of the feed, the feed's ``EMPTY`` marker, or ``prepare(element)``.
        feed_state: the feed's position before this element (None where it was not recorded).
        first_row: the global batch's row where this replica's part starts, where known.
        global_size: rows in the element's global batch, where known.
    """

    element: Any
    feed_state: Optional[dict]
    first_row: Optional[int]
    global_size: Optional[int]


class Lookahead:
    """Up to ``depth`` elements of ``feed`` read ahead of the consumer (see the module docstring).

    Args:
        feed: a `distrib.data.distribution.feeds.Feed`.
        depth: elements kept read ahead after each `next`.
        prepare: applied to each element (not None, not ``empty``) as it is read.
        empty: the feed's marker for "this replica's part of the step is empty".
    """

    def __init__(self, feed: Any, depth: int, prepare: Callable[[Any], Any], empty: Any) -> None:
        self.feed = feed
        self.depth = depth
        self._prepare = prepare
        self._empty = empty
        self._queue: Deque[Ahead] = deque()
        self._ended = False

    def _read_one(self, record_position: bool) -> None:
        position = self.feed.state() if record_position else None
        element = self.feed.next()
        if element is None:
            self._ended = True
        elif element is not self._empty:
            element = self._prepare(element)
        self._queue.append(Ahead(element, position, self.feed.first_row, self.feed.global_size))

    def peek(self) -> Ahead:
        """The next element without handing it out (its position is recorded)."""
        if not self._queue:
            self._read_one(record_position=True)
        return self._queue[0]

    def next(self) -> Ahead:
        """Hand out the next element, then read ahead up to ``depth`` elements."""
        if not self._queue:
            self._read_one(record_position=self.depth > 0)
        head = self._queue.popleft()
        while not self._ended and len(self._queue) < self.depth:
            self._read_one(record_position=True)
        return head

    @property
    def pending(self) -> bool:
        """True if elements were read and not handed out yet."""
        return bool(self._queue)

    def state(self) -> dict:
        """The position of the first element not handed out yet."""
        return self._queue[0].feed_state if self._queue else self.feed.state()  # type: ignore[return-value]

    def rewind(self, make_feed: Callable[[dict], Any]) -> None:
        """Forget what was read ahead: ``feed`` becomes ``make_feed(position of the first unread element)``."""
        if self._queue:
            self.feed = make_feed(self.state())
            self._queue.clear()
            self._ended = False
