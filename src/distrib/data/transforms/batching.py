"""`batch` and `unbatch`.

``batch(n)`` collects ``n`` consecutive elements. When they are rows of one
in-memory table (the usual case) the batch stays a `LazyBatch`: an index
array, gathered only when consumed. ``unbatch`` turns a batch back into rows,
as an index block when it can.

Example:
    >>> [b.tolist() for b in Dataset.range(5).batch(2)]
    [[0, 1], [2, 3], [4]]
    >>> Dataset.range(5).batch(2, drop_remainder=True).cardinality()
    2
    >>> [int(v) for v in Dataset.range(5).batch(2).unbatch()]
    [0, 1, 2, 3, 4]
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from distrib.data.blocks import Block, ListBlock, build_batch, unbatch_element
from distrib.data.dataset import Dataset
from distrib.data.options import INFINITE, UNKNOWN
from distrib.data.stream import BlockIterator, IterContext
from distrib.data.structure import batched_spec, unbatched_spec
from distrib.data.transforms.elementwise import _Unary

__all__ = ["BatchDataset", "UnbatchDataset"]


class BatchDataset(_Unary):
    def __init__(self, input_dataset: Dataset, batch_size: int, drop_remainder: bool) -> None:
        super().__init__(input_dataset)
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)
        self.drop_remainder = bool(drop_remainder)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        return n // self.batch_size if self.drop_remainder else -(-n // self.batch_size)

    def _static_spec(self) -> Any:
        return batched_spec(self._input.element_spec, self.batch_size if self.drop_remainder else None)

    def _iterator(self, ctx: IterContext, lineage: Tuple[int, ...], state: Optional[dict]) -> BlockIterator:
        inner = self._input._iterator(ctx, lineage, state["in"] if state else None)
        return _BatchIterator(self.batch_size, self.drop_remainder, inner)


class _BatchIterator(BlockIterator):
    def __init__(self, size: int, drop: bool, inner: BlockIterator) -> None:
        self._size, self._drop, self._in = size, drop, inner
        self._done = False
        inner.batched_by(size)

    def next_block(self, limit: int) -> Optional[Block]:
        if self._done:
            return None
        size = self._size
        first = self._in.next_block(size)
        if first is None:
            self._done = True
            return None
        blocks: List[Block] = [first]
        have = len(first)
        while have < size:
            block = self._in.next_block(size - have)
            if block is None:
                self._done = True
                break
            blocks.append(block)
            have += len(block)
        if have < size and self._drop:
            return None
        return ListBlock([build_batch(blocks)])

    def state(self) -> dict:
        return {"in": self._in.state()}


class UnbatchDataset(_Unary):
    def _cardinality(self) -> int:
        inner = self._input
        if isinstance(inner, BatchDataset):  # unbatch(batch(x)) is x, less a dropped remainder
            n = inner._input._cardinality()
            if n >= 0 and inner.drop_remainder:
                return n // inner.batch_size * inner.batch_size
            return n
        n = inner._cardinality()
        return n if n in (INFINITE, 0) else UNKNOWN

    def _static_spec(self) -> Any:
        return unbatched_spec(self._input.element_spec)

    def _iterator(self, ctx: IterContext, lineage: Tuple[int, ...], state: Optional[dict]) -> BlockIterator:
        return _UnbatchIterator(self, ctx, lineage, state)


class _UnbatchIterator(BlockIterator):
    """Holds the current batch; its state is the input's state before that batch plus an offset."""

    def __init__(self, node: UnbatchDataset, ctx: IterContext, lineage: Tuple[int, ...],
                 state: Optional[dict]) -> None:
        self._cur: Optional[Block] = None
        self._off = 0
        self._before: Optional[dict] = None
        if state is not None and state.get("before") is not None:
            self._in = node._input._iterator(ctx, lineage, state["before"])
            self._load_next()
            self._off = int(state["off"])
        else:
            self._in = node._input._iterator(ctx, lineage, state["in"] if state else None)

    def _load_next(self) -> bool:
        self._before = self._in.state()
        block = self._in.next_block(1)
        if block is None:
            self._cur = None
            return False
        self._cur = unbatch_element(block.elements()[0])
        self._off = 0
        return True

    def next_block(self, limit: int) -> Optional[Block]:
        while self._cur is None or self._off >= len(self._cur):
            if not self._load_next():
                return None
        lo = self._off
        hi = min(len(self._cur), lo + limit)
        self._off = hi
        return self._cur.slice(lo, hi)

    def state(self) -> dict:
        if self._cur is None or self._off >= len(self._cur):
            return {"in": self._in.state(), "before": None}
        return {"before": self._before, "off": self._off}
