"""Index-planned data: tables, blocks of elements and lazy batches.

Pipelines built on in-memory sources never move features until the end.
A *table* holds the examples (tensors with a common leading dimension, a
range, a torch map-style dataset); an `IndexBlock` is a run of consecutive
pipeline elements given as row indices into one table; `batch()` turns index
blocks into a `LazyBatch` (table + index array + pending batch-level maps).
Only when a batch is needed is it gathered, with one ``index_select`` per
tensor, and a distributed iterator gathers just its replica's slice.

Streams that hold computed values (after an element-wise ``map``, from a
generator) travel as `ListBlock` s of elements instead; every operator accepts
both.

Example:
    >>> table = TensorTable((torch.arange(10.0), torch.arange(10)))
    >>> lazy = LazyBatch(table, np.array([7, 2, 5]))
    >>> lazy.slice(1, 3).value()
    (tensor([2., 5.]), tensor([2, 5]))
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils import data as tud

from distrib.data.structure import (
    call_unpacked, cat_structures, leading_size, leaves, map_leaves, slice_structure,
    spec_of, stack_structures, to_structure)

__all__ = ["Table", "TensorTable", "RangeTable", "MapStyleTable", "table_for", "Block", "IndexBlock",
           "ListBlock", "LazyBatch", "materialize", "build_batch", "unbatch_element",
           "slice_element", "element_size"]


class Table:
    """Random access to the rows of an in-memory source."""

    def __len__(self) -> int:
        raise NotImplementedError

    def gather(self, idx: np.ndarray) -> Any:
        """Rows ``idx`` as one batch (a structure of tensors with leading dimension ``len(idx)``)."""
        raise NotImplementedError

    def row(self, i: int) -> Any:
        """Row ``i`` as one element."""
        raise NotImplementedError

    def row_spec(self) -> Any:
        """The spec of one row, or None when it is only known by reading a row."""
        return None


class TensorTable(Table):
    """Rows of a structure of tensors that share their leading dimension (no copy is made)."""

    def __init__(self, structure: Any) -> None:
        self._structure = structure
        self._leaves: List[torch.Tensor] = leaves(structure)
        self._n = leading_size(structure, "from_tensor_slices input") if self._leaves else 0
        self._single = isinstance(structure, torch.Tensor)  # strings go through map_leaves
        self._plain_tuple = type(structure) is tuple and all(
            isinstance(x, torch.Tensor) for x in structure)
        #: Tensors on accelerators are gathered there, with the index copied to their device.
        self._on_device = any(isinstance(t, torch.Tensor) and t.device.type != "cpu" for t in self._leaves)

    def __len__(self) -> int:
        return self._n

    def gather(self, idx: np.ndarray) -> Any:
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        index = torch.from_numpy(idx)
        if self._on_device:
            return self._gather_on_devices(idx, index)
        if self._single:
            return torch.index_select(self._structure, 0, index)
        if self._plain_tuple:
            return tuple(torch.index_select(t, 0, index) for t in self._structure)
        return map_leaves(lambda t: torch.index_select(t, 0, index) if isinstance(t, torch.Tensor)
                          else t[idx], self._structure)

    def _gather_on_devices(self, idx: np.ndarray, index: torch.Tensor) -> Any:
        """Each tensor's rows gathered on its own device (the index is copied once per device)."""
        indices = {torch.device("cpu"): index}

        def one(t: Any) -> Any:
            if not isinstance(t, torch.Tensor):
                return t[idx]
            if t.device not in indices:
                indices[t.device] = index.to(t.device, non_blocking=True)
            return torch.index_select(t, 0, indices[t.device])
        return map_leaves(one, self._structure)

    def row(self, i: int) -> Any:
        if self._single:
            return self._structure[i]
        return map_leaves(lambda t: t[i], self._structure)

    def row_spec(self) -> Any:
        return map_leaves(lambda s: type(s)(s.shape[1:], s.dtype), spec_of(self._structure))


class RangeTable(Table):
    """Rows ``start, start + step, ...`` computed on demand (nothing is stored)."""

    def __init__(self, start: int, step: int, n: int, dtype: torch.dtype = torch.int64) -> None:
        self._start, self._step, self._n, self._dtype = start, step, n, dtype

    def __len__(self) -> int:
        return self._n

    def gather(self, idx: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(self._start + np.asarray(idx, dtype=np.int64) * self._step).to(self._dtype)

    def row(self, i: int) -> torch.Tensor:
        return torch.tensor(self._start + int(i) * self._step, dtype=self._dtype)

    def row_spec(self) -> Any:
        from distrib.data.structure import TensorSpec

        return TensorSpec((), self._dtype)


class MapStyleTable(Table):
    """Rows of a torch map-style ``Dataset`` (``dataset[i]``), fetched only when needed.

    Args:
        dataset: anything with ``__len__`` and ``__getitem__``.
        collate: turns a list of items into a batch (default: stack tensors per component).
    """

    def __init__(self, dataset: Any, collate: Optional[Callable[[List[Any]], Any]] = None) -> None:
        self._dataset = dataset
        self._collate = collate

    def __len__(self) -> int:
        return len(self._dataset)

    def _items(self, idx: np.ndarray) -> List[Any]:
        keys = [int(i) for i in idx]
        getitems = getattr(self._dataset, "__getitems__", None)  # torch Dataset: __getitems__ is optional (batched reads)
        if getitems is not None:
            return list(getitems(keys))
        return [self._dataset[i] for i in keys]

    def gather(self, idx: np.ndarray) -> Any:
        items = self._items(idx)
        if self._collate is not None:
            return to_structure(self._collate(items))
        return stack_structures([to_structure(item) for item in items])

    def row(self, i: int) -> Any:
        return to_structure(self._dataset[int(i)])


def table_for(dataset: Any, collate: Optional[Callable[[List[Any]], Any]] = None) -> Table:
    """A table over a torch map-style dataset (direct tensor indexing for a ``TensorDataset``)."""
    if isinstance(dataset, tud.TensorDataset) and collate is None:
        return TensorTable(tuple(dataset.tensors))
    return MapStyleTable(dataset, collate)


class Block:
    """A run of consecutive elements of a stream (never empty)."""

    def __len__(self) -> int:
        raise NotImplementedError

    def slice(self, lo: int, hi: int) -> "Block":
        raise NotImplementedError

    def select(self, positions: np.ndarray) -> "Block":
        """The elements at ``positions`` (an int array), in that order."""
        raise NotImplementedError

    def elements(self) -> List[Any]:
        """The elements one by one (rows are materialized; lazy batches stay lazy)."""
        raise NotImplementedError

    def as_batch(self) -> Any:
        """All elements of the block stacked into one materialized batch."""
        raise NotImplementedError


class IndexBlock(Block):
    """Elements given as row indices into one table."""

    __slots__ = ("table", "idx")

    def __init__(self, table: Table, idx: np.ndarray) -> None:
        self.table = table
        self.idx = idx

    def __len__(self) -> int:
        return len(self.idx)

    def slice(self, lo: int, hi: int) -> "IndexBlock":
        return IndexBlock(self.table, self.idx[lo:hi])

    def select(self, positions: np.ndarray) -> "IndexBlock":
        return IndexBlock(self.table, self.idx[positions])

    def elements(self) -> List[Any]:
        return [self.table.row(i) for i in self.idx.tolist()]

    def as_batch(self) -> Any:
        return self.table.gather(self.idx)


class ListBlock(Block):
    """Elements held as values (structures of tensors, or `LazyBatch` es)."""

    __slots__ = ("items",)

    def __init__(self, items: List[Any]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def slice(self, lo: int, hi: int) -> "ListBlock":
        return ListBlock(self.items[lo:hi])

    def select(self, positions: np.ndarray) -> "ListBlock":
        return ListBlock([self.items[p] for p in positions.tolist()])

    def elements(self) -> List[Any]:
        return self.items

    def as_batch(self) -> Any:
        return stack_structures([materialize(x) for x in self.items])


class RowKeyed:
    """Base of a map function whose random draws follow the rows' place in the global batch
    (`distrib.data.transforms.random_draws.RowKeyedCall`): a replica gathering rows ``lo:hi`` calls
    ``at_row(lo, rows)`` instead of ``fn(rows)``. A plain base class, not a protocol: the check
    runs for every map of every batch."""

    __slots__ = ()

    def at_row(self, first_row: int, element: Any) -> Any:
        raise NotImplementedError


class LazyBatch:
    """A batch not yet gathered: rows ``idx`` of ``table``, then batch-level maps ``fns``.

    Slicing keeps it lazy, so a replica gathers only its own rows and applies
    the maps to that slice (as tf.distribute does after rebatching).
    """

    __slots__ = ("table", "idx", "fns", "start")

    def __init__(self, table: Table, idx: np.ndarray, fns: Tuple[Callable, ...] = (), start: int = 0) -> None:
        self.table = table
        self.idx = idx
        self.fns = fns
        self.start = start  # the first row's place in the whole batch (a replica's slice starts later)

    @property
    def size(self) -> int:
        return len(self.idx)

    def slice(self, lo: int, hi: int) -> "LazyBatch":
        return LazyBatch(self.table, self.idx[lo:hi], self.fns, self.start + lo)

    def with_map(self, fn: Callable) -> "LazyBatch":
        return LazyBatch(self.table, self.idx, self.fns + (fn,), self.start)

    def value(self) -> Any:
        out = self.table.gather(self.idx)
        for fn in self.fns:
            out = to_structure(fn.at_row(self.start, out) if isinstance(fn, RowKeyed) else call_unpacked(fn, out))
        return out


def materialize(element: Any) -> Any:
    """The value of an element (gathers a `LazyBatch`)."""
    return element.value() if type(element) is LazyBatch else element


def build_batch(blocks: Sequence[Block]) -> Any:
    """Consecutive blocks as one batch element: lazy when they index one table."""
    first = blocks[0]
    if type(first) is IndexBlock and all(
            type(b) is IndexBlock and b.table is first.table for b in blocks):
        idx = first.idx if len(blocks) == 1 else np.concatenate([b.idx for b in blocks])
        return LazyBatch(first.table, idx)
    if len(blocks) > 1 and all(type(b) is ListBlock for b in blocks):  # computed elements: one stack, one copy
        return stack_structures([materialize(x) for b in blocks for x in b.items])
    return cat_structures([b.as_batch() for b in blocks])


def unbatch_element(element: Any) -> Block:
    """The rows of one batch element as a block (stays index-planned when it can)."""
    if type(element) is LazyBatch and not element.fns:
        return IndexBlock(element.table, element.idx)
    value = materialize(element)
    table = TensorTable(value)
    return IndexBlock(table, np.arange(len(table), dtype=np.int64))


def slice_element(element: Any, lo: int, hi: int) -> Any:
    """Rows ``lo:hi`` of a batch element, lazy or not."""
    if type(element) is LazyBatch:
        return element.slice(lo, hi)
    return slice_structure(element, lo, hi)


def element_size(element: Any, what: str = "element") -> int:
    """The batch size of a batch element."""
    if type(element) is LazyBatch:
        return element.size
    return leading_size(element, what)
