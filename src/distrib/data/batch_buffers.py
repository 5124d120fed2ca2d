"""Recycled memory for large batches: a batch's block goes back to a pool when its tensor dies.

glibc serves a block as large as a batch of images (38.5 MB for 64 float
224x224x3) with a fresh ``mmap``, page-faulted on first touch: most of a
stack's time (docs/input-pipelines.md, "Feeding a GPU"). A batch tensor from
`stacked` views a block allocated once; when the last tensor or view on it
is freed the block serves the next batch of the same byte size. Blocks under
`MIN_POOLED_BYTES` are left to malloc; at most `FREE_PER_SIZE` idle blocks
of one size are kept.

Example:
    >>> a = torch.ones(2, 1024, 1024)
    >>> out = stacked([a, a])                 # 16 MiB: a pooled block
    >>> ptr = out.data_ptr(); del out         # the block goes back to the pool
    >>> stacked([a, a]).data_ptr() == ptr     # and serves the next batch
    True
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Dict, List, Optional, Sequence, Set

import numpy as np
import torch

__all__ = ["stacked", "MIN_POOLED_BYTES", "FREE_PER_SIZE", "NUMPY_DTYPES", "pooled_bytes", "lend_rows",
           "rows_returned", "rows_block"]

#: Batches smaller than this are stacked into plain torch memory.
MIN_POOLED_BYTES = 4 * 1024 * 1024
#: Idle blocks kept per byte size (a prefetch buffer's worth, and the batch being built).
FREE_PER_SIZE = 4
_ALIGN = 64  # bytes, as torch's own CPU allocator aligns

#: The torch dtypes numpy holds, and numpy's type for each (what crosses into numpy memory as is).
NUMPY_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
          torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
          torch.uint8: np.uint8, torch.bool: np.bool_, torch.complex64: np.complex64,
          torch.complex128: np.complex128}

_free: Dict[int, List[np.ndarray]] = {}
_row_blocks: Set[int] = set()  # addresses of blocks lent as rows (shared_slots' groups)
_lock = threading.RLock()  # re-entrant: a finalizer may run (cyclic GC) while it is held


def _after_fork_in_child() -> None:
    """A forked child starts with an empty pool and a fresh lock (a parent thread may have held it)."""
    global _lock
    _lock = threading.RLock()
    _free.clear()
    _row_blocks.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def pooled_bytes() -> int:
    """Bytes the pool keeps idle now (for tests and diagnostics)."""
    with _lock:
        return sum(size * len(blocks) for size, blocks in _free.items())


def _give_back(nbytes: int, block: np.ndarray) -> None:
    with _lock:
        idle = _free.setdefault(nbytes, [])
        if len(idle) < FREE_PER_SIZE:
            idle.append(block)


def _block(nbytes: int) -> "tuple[np.ndarray, np.ndarray]":
    """An idle pooled block of ``nbytes`` (or a new one), and its ``nbytes`` aligned as torch aligns."""
    with _lock:
        idle = _free.get(nbytes)
        block = idle.pop() if idle else None
    if block is None:
        block = np.empty(nbytes + _ALIGN, np.uint8)
    offset = (-block.ctypes.data) % _ALIGN
    return block, block[offset:offset + nbytes]


def _empty(shape: Sequence[int], dtype: torch.dtype, nbytes: int) -> torch.Tensor:
    """An uninitialised CPU tensor of ``nbytes`` on a pooled block: back in the pool when it is freed."""
    block, aligned = _block(nbytes)
    # The exact array object handed to torch is the one the tensor keeps alive (numpy collapses view
    # chains onto the owner, so an intermediate view would die at once): it carries the finalizer.
    array = aligned.view(NUMPY_DTYPES[dtype]).reshape(tuple(shape))
    weakref.finalize(array, _give_back, nbytes, block)
    return torch.from_numpy(array)


def _rows_back(nbytes: int, block: np.ndarray, address: int) -> None:
    rows_returned(address)
    _give_back(nbytes, block)


def rows_block(nbytes: int) -> torch.Tensor:
    """A uint8 tensor of ``nbytes`` on a pooled block, lent as rows (`lend_rows`) until the last tensor
    on it is freed; then it is no longer rows and serves the pool again."""
    block, array = _block(nbytes)
    address = array.ctypes.data
    lend_rows(address)
    weakref.finalize(array, _rows_back, nbytes, block, address)
    return torch.from_numpy(array)


def lend_rows(address: int) -> None:
    """The block at ``address`` is lent as rows: elements written in place, in order, by distrib."""
    with _lock:
        _row_blocks.add(address)


def rows_returned(address: int) -> None:
    """The block at ``address`` is no longer lent as rows."""
    with _lock:
        _row_blocks.discard(address)


def _rows_in_place(parts: Sequence[torch.Tensor]) -> Optional[torch.Tensor]:
    """The batch ``parts`` already form, as a view, where they are consecutive rows of one lent block.

    Only blocks distrib lent as rows qualify (`lend_rows`): their rows are nobody else's, so the
    batch may share their memory where ``torch.stack`` would copy.
    """
    first = parts[0]
    if type(first) is not torch.Tensor or first.device.type != "cpu" or not first.is_contiguous():
        return None
    storage = first.untyped_storage().data_ptr()
    if storage not in _row_blocks:
        return None
    row, base, shape, dtype = first.numel() * first.element_size(), first.data_ptr(), first.shape, first.dtype
    for k, part in enumerate(parts):
        if (type(part) is not torch.Tensor or part.data_ptr() != base + k * row or part.shape != shape
                or part.dtype != dtype or part.requires_grad or not part.is_contiguous()
                or part.untyped_storage().data_ptr() != storage):
            return None
    return first.as_strided((len(parts), *shape), (first.numel(), *first.stride()), first.storage_offset())


def stacked(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.stack(parts)``: a view where the rows already lie in order in a lent block, else into a
    pooled block when the batch is large, a CPU tensor and numpy-typed."""
    in_place = _rows_in_place(parts) if _row_blocks else None
    if in_place is not None:
        return in_place
    first = parts[0]
    nbytes = len(parts) * first.numel() * first.element_size()
    if (nbytes < MIN_POOLED_BYTES or first.device.type != "cpu" or first.dtype not in NUMPY_DTYPES
            or any(p.requires_grad or p.dtype != first.dtype for p in parts)):
        return torch.stack(list(parts))  # small, or a case torch's own promotion and autograd handle
    out = _empty((len(parts), *first.shape), first.dtype, nbytes)
    return torch.stack(list(parts), out=out)
