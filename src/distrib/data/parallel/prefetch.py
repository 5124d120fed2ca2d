"""Background ``prefetch(n)``: a thread reading at most ``n`` elements ahead, exactly resumable.

The first block is read on the caller's thread (so seeds drawn when the
pipeline starts are drawn where the serial pipeline draws them); then a
daemon thread reads on, one element at a time (so an error surfaces exactly
where the serial pipeline raises it), while fewer than ``n`` elements wait. Elements still
planned as indices (rows of an in-memory table, lazy batches) are passed
through instead: gathering them is cheaper than a hand-off, and a
distributed replica must gather only its own rows.

The position is the input's state before the block holding the first
element not handed out, and how many of that block's elements were handed
out (``skip``); the thread records both as it reads, so the position never
races with it. The thread stops at the end of the input, on an error (raised
to the consumer in order) and when the iterator is dropped.

Example:
    >>> it = iter(Dataset.range(100).map(slow).prefetch(4))
    >>> next(it)           # the thread now keeps up to 4 more elements ready
"""
from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Any, Deque, List, Optional, Tuple

from distrib.data.blocks import Block, IndexBlock, LazyBatch, ListBlock
from distrib.data.dataset import Dataset
from distrib.data.stream import BlockIterator, IterContext
from distrib.data.transforms.elementwise import _Unary

__all__ = ["PrefetchDataset", "AUTOTUNE_PREFETCH"]

Lineage = Tuple[int, ...]

#: The buffer ``prefetch(AUTOTUNE)`` keeps: double buffering (one element consumed, one being read).
AUTOTUNE_PREFETCH = 2
_END = object()


class PrefetchDataset(_Unary):
    """`Dataset.prefetch` (see the module docstring); ``buffer_size`` 0 reads on demand."""

    def __init__(self, input_dataset: Dataset, buffer_size: int) -> None:
        super().__init__(input_dataset)
        if int(buffer_size) < -1:
            raise ValueError(f"prefetch buffer_size must be >= 0 or AUTOTUNE (-1), got {buffer_size}")
        self._size = AUTOTUNE_PREFETCH if int(buffer_size) == -1 else int(buffer_size)

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        inner = self._input._iterator(ctx, lineage, state["in"] if state else None)
        return _PrefetchIterator(inner, self._size, int(state.get("skip", 0)) if state else 0)


class _Buffer:
    """What the reading thread and the consumer share (never the iterator itself)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.cond = threading.Condition()
        #: (input state before the block, the block, input state after it) or (_END, error or None, None)
        self.items: Deque[Tuple[Any, Any, Any]] = deque()
        self.count = 0  # elements waiting
        self.stop = False

    def halt(self) -> None:
        with self.cond:
            self.stop = True
            self.cond.notify_all()


def _read(inner: BlockIterator, buffer: _Buffer) -> None:
    """The reading thread: fill ``buffer`` up to its size until the end, an error or a stop."""
    cond = buffer.cond
    try:
        while True:
            with cond:
                while buffer.count >= buffer.size and not buffer.stop:
                    cond.wait()
                if buffer.stop:
                    return
            before = inner.state()
            block = inner.next_block(1)  # one at a time: an error loses none of the elements before it
            with cond:
                if block is None:
                    buffer.items.append((_END, None, None))
                    cond.notify_all()
                    return
                buffer.items.append((before, block, inner.state()))
                buffer.count += len(block)
                cond.notify_all()
    except BaseException as error:  # noqa: BLE001 - handed to the consumer, raised there in order
        with cond:
            buffer.items.append((_END, error, None))
            cond.notify_all()


def _lazy(block: Block) -> bool:
    return type(block) is IndexBlock or all(type(x) is LazyBatch for x in block.elements())


class _PrefetchIterator(BlockIterator):
    def __init__(self, inner: BlockIterator, size: int, skip: int) -> None:
        self._in, self._size = inner, size
        self._skip = skip                        # elements of the input to drop first (a restore)
        self._position: Tuple[Any, int] = (None, skip)  # where the consumer is when nothing waits
        self._buffer: Optional[_Buffer] = None
        self._head: List[Any] = []               # [before, block, after, handed out] being consumed
        self._passing = size == 0
        self._ended = False

    def _drop_skipped(self) -> None:
        while self._skip > 0:
            block = self._in.next_block(self._skip)
            if block is None:
                break
            self._skip -= len(block)

    def _first(self, limit: int) -> Optional[Block]:
        """The first block, read here; then the thread starts (or the iterator passes through)."""
        self._drop_skipped()
        block = self._in.next_block(limit)
        if block is None:
            self._ended = True
            return None
        if _lazy(block):
            self._passing = True
            return block
        buffer = _Buffer(self._size)
        self._position = (self._in.state(), 0)
        thread = threading.Thread(target=_read, args=(self._in, buffer), name="distrib-prefetch", daemon=True)
        weakref.finalize(self, _Buffer.halt, buffer)
        self._buffer = buffer
        thread.start()
        return block

    def next_block(self, limit: int) -> Optional[Block]:
        if self._passing:
            self._drop_skipped()
            return self._in.next_block(limit)
        if self._ended:
            return None
        buffer = self._buffer
        if buffer is None:
            return self._first(limit)
        if not self._head:
            with buffer.cond:
                while not buffer.items:
                    buffer.cond.wait()
                before, block, after = buffer.items.popleft()
            if before is _END:
                self._ended = True
                if block is not None:
                    raise block
                return None
            self._head = [before, block, after, 0]
        before, block, after, taken = self._head
        out = block.slice(taken, min(len(block), taken + limit))
        taken += len(out)
        with buffer.cond:
            buffer.count -= len(out)
            buffer.cond.notify_all()
        if taken >= len(block):
            self._head = []
            self._position = (after, 0)
        else:
            self._head[3] = taken
        return out

    def state(self) -> dict:
        if self._buffer is None:
            return {"in": self._in.state(), "skip": self._skip} if self._skip else {"in": self._in.state()}
        before, skip = (self._head[0], self._head[3]) if self._head else self._waiting_position()
        return {"in": before, "skip": skip} if skip else {"in": before}

    def _waiting_position(self) -> Tuple[Any, int]:
        buffer = self._buffer
        assert buffer is not None
        with buffer.cond:
            if buffer.items and buffer.items[0][0] is not _END:
                return buffer.items[0][0], 0
        return self._position
