"""``interleave(..., num_parallel_calls=N)``: the open datasets read ahead on N threads, serial order kept.

Each open dataset (a *slot*) is read in chunks of ``block_length`` elements
(at least 2) by a task on the pool, one chunk in flight per slot while the
consumer takes the previous one; the consumer walks the cycle exactly as the
serial interleave does, so the order is TF's deterministic parallel
interleave order. ``deterministic=False`` is accepted and keeps that order.

A slot's position is its dataset's state before the chunk being consumed
and how many of that chunk's elements were handed out: read-ahead chunks
are dropped on restore and read again.

Example:
    >>> files = Dataset.from_tensor_slices(["a.txt", "b.txt"])
    >>> lines = files.interleave(TextLineDataset, cycle_length=2, num_parallel_calls=2)
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Deque, List, Optional, Tuple

from distrib.data.blocks import Block, ListBlock, materialize
from distrib.data.transforms.combinators import InterleaveDataset, _InterleaveIterator
from distrib.data.dataset import Dataset
from distrib.data.parallel.workers import WorkerPool, parallel_calls
from distrib.data.stream import BlockIterator, IterContext

__all__ = ["ParallelInterleaveDataset"]

Lineage = Tuple[int, ...]


class ParallelInterleaveDataset(InterleaveDataset):
    """`Dataset.interleave` with ``num_parallel_calls`` (see the module docstring)."""

    def __init__(self, input_dataset: Dataset, map_func: Callable, cycle_length: Optional[int],
                 block_length: Optional[int], num_parallel_calls: int) -> None:
        super().__init__(input_dataset, map_func, cycle_length, block_length)
        parallel_calls(num_parallel_calls)  # an error now for a bad count
        self._calls = int(num_parallel_calls)

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        size = parallel_calls(self._calls, int(ctx.options().threading.private_threadpool_size))
        return _ParallelInterleaveIterator(self, ctx, lineage, state, min(size, self._cycle))


def _read_chunk(inner: BlockIterator, count: int) -> Tuple[List[Any], dict, Optional[BaseException]]:
    """On a worker: up to ``count`` elements of ``inner`` (materialized), its state after them, and the
    error that stopped the reading (the elements before it are kept: the serial order hands them out first)."""
    elements: List[Any] = []
    try:
        while len(elements) < count:
            block = inner.next_block(1)
            if block is None:
                break
            elements.append(materialize(block.elements()[0]))
    except BaseException as error:  # noqa: BLE001 - raised to the consumer after the elements before it
        return elements, {}, error
    return elements, inner.state(), None


class _SlotReader(BlockIterator):
    """One open dataset, read ahead a chunk at a time on the pool."""

    def __init__(self, inner: BlockIterator, pool: WorkerPool, chunk: int, skip: int = 0) -> None:
        self._in, self._pool, self._chunk = inner, pool, chunk
        self._before = inner.state()             # the dataset's state before the chunk being consumed
        self._elements: List[Any] = []
        self._taken = skip                       # a restore drops the chunk's first `skip` elements
        self._after: Optional[dict] = None       # its state after that chunk
        self._pending: Deque[Tuple[Future, int]] = deque([(pool.submit(_read_chunk, inner, chunk + skip),
                                                            chunk + skip)])
        self._ended = False
        self._error: Optional[BaseException] = None

    def next_block(self, limit: int) -> Optional[Block]:
        while self._taken >= len(self._elements):
            if self._error is not None:
                raise self._error
            if self._ended or not self._pending:
                return None
            future, asked = self._pending.popleft()
            elements, after, self._error = future.result()
            if self._after is not None:
                self._before, self._taken = self._after, 0
            self._elements, self._after = elements, after
            if len(elements) < asked or self._error is not None:
                self._ended = True
            else:
                self._pending.append((self._pool.submit(_read_chunk, self._in, self._chunk), self._chunk))
            if self._taken >= len(elements) and self._ended and self._error is None:
                return None
        hi = min(len(self._elements), self._taken + limit)
        out = ListBlock(self._elements[self._taken:hi])
        self._taken = hi
        return out

    def state(self) -> dict:
        if self._after is not None and self._taken >= len(self._elements):
            return {"in": self._after}
        return {"in": self._before, "skip": self._taken} if self._taken else {"in": self._before}


class _ParallelInterleaveIterator(_InterleaveIterator):
    def __init__(self, node: ParallelInterleaveDataset, ctx: IterContext, lineage: Lineage,
                 state: Optional[dict], size: int) -> None:
        self._pool = WorkerPool(size, processes=False)
        self._pool.stop_with(self)
        self._chunk = max(2, node._block)
        super().__init__(node, ctx, lineage, state)

    def _open_slot(self, element: Any) -> BlockIterator:
        return _SlotReader(self._node._open(element), self._pool, self._chunk)

    def _restore_slot(self, ctx: IterContext, lineage: Lineage, slot: dict) -> BlockIterator:
        inner = slot["inner"]
        it = self._node._reopen(ctx, lineage, slot["before"], inner["in"])
        return _SlotReader(it, self._pool, self._chunk, int(inner.get("skip", 0)))
