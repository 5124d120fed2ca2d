"""`Dataset.cache(filename)`'s iterators: fill the file on the first complete pass, stream it afterwards.

A pass that starts while no complete cache file exists reads its input and
writes every element to a temporary file, published when the input ends (so
an abandoned pass leaves nothing); a pass that starts while one exists reads
it, record by record, and never runs the input. Each process writes its own
file (`worker_suffix`, set by the distributed dataset on the `IterContext`).

Positions (``state``): ``{"mode": "fill", "in0", "n"}`` while filling — a
restore re-reads the ``n`` elements from where the filling pass began, writing
them to a fresh temporary file, then continues — and ``{"mode": "read",
"pos"}`` while reading: a restore seeks to element ``pos`` (rebuilding the
file first if it is gone, from the pass that filled it).
"""
from __future__ import annotations

import logging
from typing import List, Optional, Protocol, Tuple

from distrib.data.blocks import Block, materialize
from distrib.data.dataset import Dataset
from distrib.data.caching.cache_file import CacheReader, CacheWriter, cache_path, open_cache
from distrib.data.iterator import pipeline_signature
from distrib.data.stream import BlockIterator, IterContext, pull

__all__ = ["file_cache_iterator"]

_log = logging.getLogger("distrib.data")

Lineage = Tuple[int, ...]
_REBUILD_BLOCK = 256


class CachedNode(Protocol):
    """What the iterators need of `distrib.data.transforms.cache.CacheDataset` (which imports this module)."""

    filename: str
    _input: Dataset


def file_cache_iterator(node: CachedNode, ctx: IterContext, k: int, lineage: Lineage,
                        state: Optional[dict]) -> BlockIterator:
    """The iterator of cache node ``node`` (the ``k``-th of its pipeline) writing or reading its file."""
    path = cache_path(node.filename, ctx.cache_suffix)
    signature = pipeline_signature(node._input)
    if state is not None and state.get("mode") == "read":
        reader = _usable(path, signature) or _rebuild(node, ctx, k, path, signature, list(state["lineage"]))
        return _ReadIterator(reader, int(state["pos"]), list(state["lineage"]))
    if state is None:
        reader = _usable(path, signature)
        if reader is not None:
            return _ReadIterator(reader, 0, list(lineage))
    return _FillIterator(node, ctx, k, path, signature, lineage, state)


def _usable(path: str, signature: List[str]) -> Optional[CacheReader]:
    found = open_cache(path, signature)
    if isinstance(found, CacheReader):
        return found
    if found:
        _log.warning("distrib.data: cache file %s cannot be used (%s); rebuilding it", path, found)
    return None


def _rebuild(node: CachedNode, ctx: IterContext, k: int, path: str, signature: List[str],
             lineage: List[int]) -> CacheReader:
    """Write the cache again from the pass that filled it (or a new pass), for a restored reader."""
    source = ctx.cache_sources.get(k, {"lineage": lineage, "in": None})
    inner = node._input._iterator(ctx, tuple(source["lineage"]), source["in"])
    writer = CacheWriter(path, signature)
    block = inner.next_block(_REBUILD_BLOCK)
    while block is not None:   # streamed: the input is never held whole
        writer.add([materialize(e) for e in block.elements()])
        block = inner.next_block(_REBUILD_BLOCK)
    writer.publish()
    found = open_cache(path, signature)
    if not isinstance(found, CacheReader):
        raise RuntimeError(f"the cache file {path} just written cannot be read back: {found}")
    return found


class _ReadIterator(BlockIterator):
    def __init__(self, reader: CacheReader, pos: int, lineage: List[int]) -> None:
        self._reader = reader
        self._pos = pos
        self._lineage = lineage
        self._record = -1
        self._block: Optional[Block] = None

    def next_block(self, limit: int) -> Optional[Block]:
        if self._pos >= self._reader.total:
            self._reader.close()
            return None
        record = self._reader.locate(self._pos)
        if record != self._record:
            self._block, self._record = self._reader.read(record), record
        block = self._block
        assert block is not None
        lo = self._pos - self._reader.first_element(record)
        hi = min(len(block), lo + limit)
        self._pos += hi - lo
        return block if lo == 0 and hi == len(block) else block.slice(lo, hi)

    def state(self) -> dict:
        return {"mode": "read", "pos": self._pos, "lineage": list(self._lineage)}


class _FillIterator(BlockIterator):
    def __init__(self, node: CachedNode, ctx: IterContext, k: int, path: str, signature: List[str],
                 lineage: Lineage, state: Optional[dict]) -> None:
        self._ctx, self._k = ctx, k
        self._lineage = list(state["lineage"]) if state else list(lineage)
        self._in0 = state["in0"] if state else None
        self._in = node._input._iterator(ctx, tuple(self._lineage), self._in0)
        if self._in0 is None:
            self._in0 = self._in.state()
        self._writer: Optional[CacheWriter] = CacheWriter(path, signature)
        self._n = 0
        if state is not None:  # re-read what the interrupted pass had written already
            for block in pull(self._in, int(state["n"])):
                self._write(block)

    def _write(self, block: Block) -> None:
        assert self._writer is not None
        self._writer.add([materialize(e) for e in block.elements()])
        self._n += len(block)

    def next_block(self, limit: int) -> Optional[Block]:
        block = self._in.next_block(limit)
        if block is None:
            if self._writer is not None:
                self._writer.publish()
                self._writer = None
                self._ctx.cache_sources[self._k] = {"lineage": self._lineage, "in": self._in0}
            return None
        if self._writer is not None:
            self._write(block)
        return block

    def state(self) -> dict:
        if self._writer is None:  # published: a restore reads the file from here
            return {"mode": "read", "pos": self._n, "lineage": self._lineage}
        return {"mode": "fill", "lineage": self._lineage, "in0": self._in0, "n": self._n}
