"""Operators over several datasets: enumerate, zip, concatenate, interleave, flat_map.

Orders follow tf.data exactly:

* ``zip`` yields the structure of its inputs' elements and stops with the
  shortest input;
* ``concatenate`` yields one dataset then the other;
* ``interleave(f, cycle_length, block_length)`` keeps ``cycle_length``
  datasets ``f(x)`` open, takes ``block_length`` elements from each in turn,
  and opens the next input element's dataset in a slot when its dataset ends
  (the cycle moves on to the next slot first, as TF's does);
* ``flat_map(f)`` is ``interleave(f, cycle_length=1)``.

Every iterator is checkpointable: an open dataset ``f(x)`` is rebuilt on
restore by re-reading ``x`` from its input (``f`` must be deterministic).

Example:
    >>> ds = Dataset.range(1, 4).interleave(lambda x: Dataset.from_tensors(x).repeat(2),
    ...                                     cycle_length=2, block_length=1)
    >>> [int(v) for v in ds]
    [1, 2, 1, 2, 3, 3]
"""
from __future__ import annotations

import os
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch

from distrib.data.blocks import Block, ListBlock, materialize
from distrib.data.dataset import Dataset
from distrib.data.options import INFINITE, UNKNOWN
from distrib.data.stream import BlockIterator, IterContext
from distrib.data.structure import call_unpacked

__all__ = ["EnumerateDataset", "ZipDataset", "ConcatenateDataset", "InterleaveDataset", "zip_datasets"]

Lineage = Tuple[int, ...]
_CHUNK = 256


def _take_one(it: BlockIterator) -> Any:
    """The next element of ``it`` (materialized), or `_END`."""
    block = it.next_block(1)
    if block is None:
        return _END
    return materialize(block.elements()[0])


_END = object()


def _check(ds: Any, where: str) -> Dataset:
    if not isinstance(ds, Dataset):
        raise TypeError(f"{where} needs distrib.data.Dataset objects, got a {type(ds).__name__}")
    return ds


# ------------------------------------------------------------------- enumerate
class EnumerateDataset(Dataset):
    """`Dataset.enumerate`: ``(index, element)`` pairs, ``index`` an int64 scalar from ``start``."""

    def __init__(self, input_dataset: Dataset, start: int) -> None:
        self._input = _check(input_dataset, "enumerate")
        self._inputs = (input_dataset,)
        self._start = int(start)

    def _cardinality(self) -> int:
        return self._input._cardinality()

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        inner = self._input._iterator(ctx, lineage, state["in"] if state else None)
        return _EnumerateIterator(inner, self._start, int(state["n"]) if state else 0)


class _EnumerateIterator(BlockIterator):
    def __init__(self, inner: BlockIterator, start: int, count: int) -> None:
        self._in, self._start, self._n = inner, start, count

    def next_block(self, limit: int) -> Optional[Block]:
        block = self._in.next_block(limit)
        if block is None:
            return None
        first = self._start + self._n
        items = [(torch.tensor(first + i, dtype=torch.int64), materialize(e))
                 for i, e in enumerate(block.elements())]
        self._n += len(items)
        return ListBlock(items)

    def state(self) -> dict:
        return {"in": self._in.state(), "n": self._n}


# ------------------------------------------------------------------------- zip
def zip_datasets(datasets: Any) -> "ZipDataset":
    """``Dataset.zip``: ``datasets`` is a tuple/dict (nesting allowed) of datasets."""
    return ZipDataset(datasets)


def _flatten(structure: Any) -> List[Any]:
    if isinstance(structure, dict):
        return [x for k in structure for x in _flatten(structure[k])]
    if isinstance(structure, (tuple, list)):
        return [x for v in structure for x in _flatten(v)]
    return [structure]


def _pack(structure: Any, flat: List[Any], pos: List[int]) -> Any:
    if isinstance(structure, dict):
        return type(structure)((k, _pack(v, flat, pos)) for k, v in structure.items())
    if isinstance(structure, (tuple, list)):
        parts = [_pack(v, flat, pos) for v in structure]
        return type(structure)(*parts) if hasattr(structure, "_fields") else tuple(parts)
    pos[0] += 1
    return flat[pos[0] - 1]


class ZipDataset(Dataset):
    """`Dataset.zip`: one element from every input, in the inputs' structure."""

    def __init__(self, datasets: Any) -> None:
        flat = _flatten(datasets)
        if not flat:
            raise ValueError("Dataset.zip needs at least one dataset")
        for ds in flat:
            _check(ds, "Dataset.zip")
        self._layout = datasets
        self._inputs = tuple(flat)

    def _cardinality(self) -> int:
        cards = [d._cardinality() for d in self._inputs]
        finite = [c for c in cards if c >= 0]
        if finite:
            return min(finite)
        return UNKNOWN if UNKNOWN in cards else INFINITE

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        inners = [d._iterator(ctx, lineage, state["in"][i] if state else None)
                  for i, d in enumerate(self._inputs)]
        return _ZipIterator(self._layout, inners, bool(state and state.get("done")))


class _ZipIterator(BlockIterator):
    def __init__(self, layout: Any, inners: List[BlockIterator], done: bool) -> None:
        self._layout, self._in, self._done = layout, inners, done

    def next_block(self, limit: int) -> Optional[Block]:
        items: List[Any] = []
        while not self._done and len(items) < min(limit, _CHUNK):
            parts = []
            for it in self._in:
                value = _take_one(it)
                if value is _END:
                    self._done = True
                    break
                parts.append(value)
            else:
                items.append(_pack(self._layout, parts, [0]))
        return ListBlock(items) if items else None

    def state(self) -> dict:
        return {"in": [it.state() for it in self._in], "done": self._done}


# ----------------------------------------------------------------- concatenate
class ConcatenateDataset(Dataset):
    """`Dataset.concatenate`: the elements of the first dataset, then of the second."""

    def __init__(self, first: Dataset, second: Dataset) -> None:
        self._inputs = (_check(first, "concatenate"), _check(second, "concatenate"))

    def _cardinality(self) -> int:
        a, b = (d._cardinality() for d in self._inputs)
        if INFINITE in (a, b):
            return INFINITE
        return UNKNOWN if UNKNOWN in (a, b) else a + b

    def _static_spec(self) -> Any:
        return None

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        return _ConcatIterator(self._inputs, ctx, lineage, state)


class _ConcatIterator(BlockIterator):
    def __init__(self, inputs: Sequence[Dataset], ctx: IterContext, lineage: Lineage,
                 state: Optional[dict]) -> None:
        self._inputs, self._ctx, self._lineage = inputs, ctx, lineage
        self._which = int(state["which"]) if state else 0
        self._cur: Optional[BlockIterator] = None
        if self._which < len(inputs):
            self._cur = inputs[self._which]._iterator(ctx, lineage, state["in"] if state else None)

    def next_block(self, limit: int) -> Optional[Block]:
        while self._cur is not None:
            block = self._cur.next_block(limit)
            if block is not None:
                return block
            self._which += 1
            self._cur = (self._inputs[self._which]._iterator(self._ctx, self._lineage, None)
                         if self._which < len(self._inputs) else None)
        return None

    def state(self) -> dict:
        return {"which": self._which, "in": None if self._cur is None else self._cur.state()}


# ------------------------------------------------------------------ interleave
class InterleaveDataset(Dataset):
    """`Dataset.interleave` (and `flat_map`, its ``cycle_length=1`` case)."""

    def __init__(self, input_dataset: Dataset, map_func: Callable, cycle_length: Optional[int],
                 block_length: Optional[int], where: str = "interleave") -> None:
        from distrib.data.readers.tfrecord import TFRecordDataset
        from distrib.data.readers.text import TextLineDataset, as_file_source

        if map_func is TextLineDataset or map_func is TFRecordDataset:  # file names in memory: a file source, as TF sees it
            input_dataset = as_file_source(_check(input_dataset, where))
        self._input = _check(input_dataset, where)
        self._inputs = (input_dataset,)
        if not callable(map_func):
            raise TypeError(f"{where} needs a function that returns a Dataset, got a "
                            f"{type(map_func).__name__}")
        if cycle_length is None or int(cycle_length) < 0:  # None / AUTOTUNE: one per core, as TF
            cycle_length = os.cpu_count() or 1
        if block_length is None or int(block_length) < 0:
            block_length = 1
        if int(cycle_length) < 1 or int(block_length) < 1:
            raise ValueError(f"{where}: cycle_length and block_length must be >= 1, got "
                             f"{cycle_length} and {block_length}")
        self._fn, self._cycle, self._block, self._where = map_func, int(cycle_length), int(block_length), where

    def _static_spec(self) -> Any:
        """The spec of ``map_func``'s dataset for the first input element, when it is static.

        TF traces ``map_func``; calling it on one element and asking the dataset it
        returns for its static spec gives the same shapes (``w.batch(3)``: ``(None,)``).
        """
        from distrib.data.iterator import DatasetIterator

        first = next(DatasetIterator(self._input, IterContext(self._input)), None)
        if first is None:
            return None
        ds = call_unpacked(self._fn, first)
        return ds._static_spec() if isinstance(ds, Dataset) else None

    def _open(self, element: Any) -> BlockIterator:
        ds = call_unpacked(self._fn, element)
        if not isinstance(ds, Dataset):
            raise TypeError(f"the {self._where} function must return a distrib.data.Dataset, "
                            f"got a {type(ds).__name__}")
        return ds._iterator(IterContext(ds), (0,), None)

    def _reopen(self, ctx: IterContext, lineage: Lineage, before: dict, inner: dict) -> BlockIterator:
        it = self._input._iterator(ctx, lineage, before)
        element = _take_one(it)
        ds = call_unpacked(self._fn, element)
        return ds._iterator(IterContext(ds), (0,), inner)

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        return _InterleaveIterator(self, ctx, lineage, state)


class _InterleaveIterator(BlockIterator):
    def __init__(self, node: InterleaveDataset, ctx: IterContext, lineage: Lineage,
                 state: Optional[dict]) -> None:
        self._node = node
        self._in = node._input._iterator(ctx, lineage, state["in"] if state else None)
        self._slots: List[Optional[BlockIterator]] = [None] * node._cycle
        self._befores: List[Optional[dict]] = [None] * node._cycle
        self._cycle_index = int(state["cycle"]) if state else 0
        self._block_index = int(state["block"]) if state else 0
        self._end_of_input = bool(state["end"]) if state else False
        if state:
            for i, slot in enumerate(state["slots"]):
                if slot is not None:
                    self._befores[i] = slot["before"]
                    self._slots[i] = self._restore_slot(ctx, lineage, slot)

    def _open_slot(self, element: Any) -> BlockIterator:
        """The iterator of ``map_func(element)`` for a free slot."""
        return self._node._open(element)

    def _restore_slot(self, ctx: IterContext, lineage: Lineage, slot: dict) -> BlockIterator:
        """An open dataset's iterator rebuilt from its slot's state."""
        return self._node._reopen(ctx, lineage, slot["before"], slot["inner"])

    def _advance(self) -> None:
        self._block_index = 0
        self._cycle_index = (self._cycle_index + 1) % len(self._slots)

    def _next(self) -> Any:
        while not self._end_of_input or any(s is not None for s in self._slots):
            i = self._cycle_index
            slot = self._slots[i]
            if slot is not None:
                value = _take_one(slot)
                if value is not _END:
                    self._block_index += 1
                    if self._block_index == self._node._block:
                        self._advance()
                    return value
                self._slots[i] = self._befores[i] = None
                self._advance()
            elif not self._end_of_input:
                before = self._in.state()
                element = _take_one(self._in)
                if element is _END:
                    self._end_of_input = True
                else:
                    self._slots[i] = self._open_slot(element)
                    self._befores[i] = before
            else:
                self._advance()
        return _END

    def next_block(self, limit: int) -> Optional[Block]:
        items: List[Any] = []
        while len(items) < min(limit, _CHUNK):
            value = self._next()
            if value is _END:
                break
            items.append(value)
        return ListBlock(items) if items else None

    def state(self) -> dict:
        slots = [None if s is None else {"before": b, "inner": s.state()}
                 for s, b in zip(self._slots, self._befores)]
        return {"in": self._in.state(), "cycle": self._cycle_index, "block": self._block_index,
                "end": self._end_of_input, "slots": slots}
