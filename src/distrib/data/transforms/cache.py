"""`Dataset.cache`: remember the first complete pass, replay it afterwards.

As in tf.data, the cache fills during the first pass that reaches the end; a
pass abandoned early (``take``) leaves nothing behind. With a filename the
cache is a file (`distrib.data.caching.file_cache`); without, contents live in
the consumer's `IterContext`, so a distributed dataset never replays a cache
filled by some other iteration. An iterator state records where the filling
pass began, so a restored process refills the cache by replaying that pass.

Example:
    >>> ds = Dataset.range(4).shuffle(4).cache().repeat(2)   # the shuffle is frozen by the cache
    >>> out = [int(v) for v in ds]; out[:4] == out[4:]
    True
"""
from __future__ import annotations

import bisect
import os
from typing import List, Optional, Tuple

import numpy as np

from distrib.data.blocks import Block
from distrib.data.caching.file_cache import file_cache_iterator
from distrib.data.dataset import Dataset
from distrib.data.stream import ALL, BlockIterator, IterContext, pull
from distrib.data.transforms.elementwise import _Unary

__all__ = ["CacheDataset"]

Lineage = Tuple[int, ...]


class CacheDataset(_Unary):
    def __init__(self, input_dataset: Dataset, filename: "str | os.PathLike[str]" = "") -> None:
        super().__init__(input_dataset)
        if not isinstance(filename, (str, os.PathLike)):
            raise TypeError(f"cache(filename): filename must be a str or path, got {type(filename).__name__}")
        self.filename = os.fspath(filename)

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        k = ctx.index(self)
        if self.filename:
            return file_cache_iterator(self, ctx, k, lineage, state)
        if state is not None and "pos" in state:
            return _ReplayIterator(_cached_blocks(self, ctx, k), int(state["pos"]))
        if state is None and (k in ctx.caches or k in ctx.cache_sources):
            return _ReplayIterator(_cached_blocks(self, ctx, k), 0)
        return _FillIterator(self, ctx, k, lineage, state)


def _cached_blocks(node: CacheDataset, ctx: IterContext, k: int) -> List[Block]:
    if k not in ctx.caches:  # restored in a new process: refill from where the first pass began
        source = ctx.cache_sources[k]
        inner = node._input._iterator(ctx, tuple(source["lineage"]), source["in"])
        ctx.caches[k] = pull(inner, ALL)
    return ctx.caches[k]


class _ReplayIterator(BlockIterator):
    def __init__(self, blocks: List[Block], pos: int) -> None:
        self._blocks = blocks
        self._starts = list(np.cumsum([0] + [len(b) for b in blocks[:-1]]).tolist()) if blocks else []
        self._total = sum(len(b) for b in blocks)
        self._pos = pos

    def next_block(self, limit: int) -> Optional[Block]:
        if self._pos >= self._total:
            return None
        i = bisect.bisect_right(self._starts, self._pos) - 1
        lo = self._pos - self._starts[i]
        block = self._blocks[i]
        hi = min(len(block), lo + limit)
        self._pos += hi - lo
        return block if lo == 0 and hi == len(block) else block.slice(lo, hi)

    def state(self) -> dict:
        return {"pos": self._pos}


class _FillIterator(BlockIterator):
    def __init__(self, node: CacheDataset, ctx: IterContext, k: int, lineage: Lineage,
                 state: Optional[dict]) -> None:
        self._ctx, self._k = ctx, k
        self._lineage = list(state["lineage"]) if state else list(lineage)
        if state is None:
            self._in = node._input._iterator(ctx, lineage, None)
            self._in0 = self._in.state()
        else:
            self._in0 = state["in0"]
            self._in = node._input._iterator(ctx, tuple(self._lineage), self._in0)
        self._recorded: List[Block] = []
        self._n = 0
        if state is not None:
            self._recorded = pull(self._in, int(state["n"]))
            self._n = sum(len(b) for b in self._recorded)

    def next_block(self, limit: int) -> Optional[Block]:
        block = self._in.next_block(limit)
        if block is None:
            if self._k not in self._ctx.caches:
                self._ctx.caches[self._k] = self._recorded
                self._ctx.cache_sources[self._k] = {"lineage": self._lineage, "in": self._in0}
            return None
        self._recorded.append(block)
        self._n += len(block)
        return block

    def state(self) -> dict:
        return {"lineage": self._lineage, "in0": self._in0, "n": self._n}
