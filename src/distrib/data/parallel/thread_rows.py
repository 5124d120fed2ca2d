"""Batch rows for map threads: a thread copies its result into the row the batch will view.

Before a ``batch``, the map thread that computed element ``i`` copies its large
tensors into row ``i % n`` of a pooled block laid out as the batch of ``n``
(`batch_buffers.rows_block`); the batch views the block instead of stacking a
copy. A result that does not match the first one's shapes stays as it is
(docs/input-pipelines.md, "Threads or processes").

Example:
    >>> lender = RowLender(rows=2)
    >>> lender.learn(torch.zeros(512, 1024))             # 2 MiB a row: worth a row
    >>> rows = [lender.lend(k) for k in range(2)]
    >>> parts = [into_rows(torch.full((512, 1024), float(k)), r)[0] for k, r in enumerate(rows)]
    >>> batch = batch_buffers.stacked(parts)             # a view of the block, no copy
    >>> batch.data_ptr() == parts[0].data_ptr(), batch[1, 0, 0].item()
    (True, 1.0)
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch

from distrib.data import batch_buffers
from distrib.data.batch_buffers import MIN_POOLED_BYTES, NUMPY_DTYPES
from distrib.data.parallel.shared_slots import aligned
from distrib.data.structure import leaves, map_leaves

__all__ = ["RowLender", "into_rows", "MIN_ROW_BYTES"]

#: A leaf smaller than this is left to the batch's stack (a copy call per row would cost more).
MIN_ROW_BYTES = 64 * 1024

Rows = Tuple[Optional[torch.Tensor], ...]


class _Place:
    __slots__ = ("shape", "dtype", "offset", "nbytes")

    def __init__(self, shape: Tuple[int, ...], dtype: torch.dtype, offset: int, nbytes: int) -> None:
        self.shape, self.dtype, self.offset, self.nbytes = shape, dtype, offset, nbytes


def _rowable(leaf: Any) -> bool:
    return (type(leaf) is torch.Tensor and leaf.device.type == "cpu" and leaf.dtype in NUMPY_DTYPES
            and not leaf.requires_grad and leaf.numel() * leaf.element_size() >= MIN_ROW_BYTES)


class RowLender:
    """Rows of batch-shaped blocks in this process's memory, lent by element number.

    Args:
        rows: the batch size after the map (elements per block).
    """

    def __init__(self, rows: int) -> None:
        self._rows = int(rows)
        self._places: Optional[List[Optional[_Place]]] = None
        self._size = 0
        self._group: Optional[Tuple[int, List[Rows]]] = None  # the block rows are lent from now, its rows
        self._stopped = self._rows < 2

    def learn(self, value: Any) -> None:
        """Lay blocks out after the first result ``value`` (its large CPU tensors get rows); once."""
        if self._places is not None or self._stopped:
            return
        places: List[Optional[_Place]] = []
        offset = 0
        for leaf in leaves(value):
            if not _rowable(leaf):
                places.append(None)
                continue
            nbytes = leaf.numel() * leaf.element_size()
            places.append(_Place(tuple(leaf.shape), leaf.dtype, offset, nbytes))
            offset = aligned(offset + self._rows * nbytes)
        if offset < MIN_POOLED_BYTES:
            self._stopped = True  # small batches: torch.stack is as cheap
            return
        self._places, self._size = places, offset

    def lend(self, number: int) -> Optional[Rows]:
        """For element ``number``: row ``number % rows`` of block ``number // rows``, one tensor per
        leaf (None: not given a row), or None before `learn` and after `stop`."""
        places = self._places
        if places is None:  # not laid out yet, or stopped
            return None
        group, row = divmod(int(number), self._rows)
        if self._group is None or self._group[0] != group:  # the earlier block lives on in its rows
            self._group = (group, self._block_rows(places))
        return self._group[1][row]

    def _block_rows(self, places: List[Optional[_Place]]) -> List[Rows]:
        """A new block's rows: for each row, one view per leaf (made here at once, not one per lend)."""
        block = batch_buffers.rows_block(self._size)
        per_leaf = [None if p is None else
                    block[p.offset:p.offset + self._rows * p.nbytes].view(p.dtype).view(self._rows, *p.shape).unbind(0)
                    for p in places]
        return [tuple(None if views is None else views[row] for views in per_leaf) for row in range(self._rows)]

    def stop(self) -> None:
        """Lend no more rows (a result did not fit its row)."""
        self._stopped, self._places, self._group = True, None, None


def into_rows(value: Any, rows: Optional[Rows]) -> Tuple[Any, bool]:
    """On a map thread: ``value`` with each leaf that has a row copied into it and replaced by the row;
    and whether every lent row was filled (False: the lender should stop)."""
    if rows is None:
        return value, True
    if type(value) is torch.Tensor and len(rows) == 1:  # the usual element: no structure to walk
        row = rows[0]
        if row is None:
            return value, True
        if not _fits(value, row):
            return value, False
        row.copy_(value)
        return row, True
    parts = leaves(value)
    if len(parts) != len(rows) or not all(row is None or _fits(leaf, row) for leaf, row in zip(parts, rows)):
        return value, False
    targets = iter(rows)

    def put(leaf: Any) -> Any:
        row = next(targets)
        if row is None:
            return leaf
        row.copy_(leaf)
        return row
    return map_leaves(put, value), True


def _fits(leaf: Any, row: torch.Tensor) -> bool:
    return (type(leaf) is torch.Tensor and leaf.dtype == row.dtype and leaf.shape == row.shape
            and leaf.device.type == "cpu" and not leaf.requires_grad)
