"""Shared-memory slots for worker-process results, lent by the parent and viewed in place.

A worker writes an element's tensors into a slot (a place in a file in
``/dev/shm``) and sends only where they lie; the parent wraps them without a
copy. Before a ``batch``, slots are *rows*: element ``i`` of a batch of ``n``
is written at row ``i % n`` of a group file laid out as the batch, so the
batch views the group instead of stacking a copy (`batch_buffers.stacked`).
A group is lent again once the last tensor on it is freed, so a kept row or
batch is never overwritten. What a slot cannot hold goes by value
(docs/input-pipelines.md, "Threads or processes").

Example (in the parent; ``write_into`` runs in the worker):
    >>> lender = SlotLender()
    >>> lender.learn([24]); slot = lender.lend(0)
    >>> packed = write_into(slot, torch.arange(6.0))     # in the worker
    >>> lender.receive(slot, packed)
    tensor([0., 1., 2., 3., 4., 5.])
    >>> lender.close()                                    # unlinks the files
"""
from __future__ import annotations

import mmap
import os
import secrets
import threading
import weakref
from multiprocessing import resource_tracker
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from distrib.data import batch_buffers
from distrib.data.batch_buffers import NUMPY_DTYPES
from distrib.data.structure import leaves, map_leaves

__all__ = ["SlotLender", "Slot", "write_into", "InSlot", "aligned"]

_ALIGN = 64
_SHM = "/dev/shm"
_ROUND = 64 * 1024
_TORCH_DTYPES = {np.dtype(v).name: k for k, v in NUMPY_DTYPES.items()}
#: A group takes at most this share of the slots' room (else one slot per element).
_GROUP_SHARE = 8


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to the alignment each tensor in a slot starts at."""
    return -(-nbytes // _ALIGN) * _ALIGN


class Slot:
    """One lent slot: its file, the file's size, and ``(offset, capacity)`` for each tensor leaf
    (None for a leaf that goes by value)."""

    __slots__ = ("name", "size", "places")

    def __init__(self, name: str, size: int, places: Tuple[Optional[Tuple[int, int]], ...]) -> None:
        self.name, self.size, self.places = name, size, places

    def __reduce__(self) -> Any:
        return (Slot, (self.name, self.size, self.places))


class InSlot:
    """A tensor the worker wrote into its slot: where it lies and what it is."""

    __slots__ = ("offset", "shape", "dtype")

    def __init__(self, offset: int, shape: Tuple[int, ...], dtype: str) -> None:
        self.offset, self.shape, self.dtype = offset, shape, dtype

    def __reduce__(self) -> Any:
        return (InSlot, (self.offset, self.shape, self.dtype))


# ----------------------------------------------------------------- the worker's side
_OPENED: Dict[str, mmap.mmap] = {}


def _open(slot: Slot) -> Optional[mmap.mmap]:
    mapping = _OPENED.get(slot.name)
    if mapping is None:
        try:
            fd = os.open(slot.name, os.O_RDWR)
        except OSError:
            return None
        try:
            mapping = _OPENED[slot.name] = mmap.mmap(fd, slot.size)
        finally:
            os.close(fd)
    return mapping


def _fits(leaf: Any, place: Optional[Tuple[int, int]]) -> bool:
    return (place is not None and type(leaf) is torch.Tensor and leaf.device.type == "cpu"
            and leaf.dtype in NUMPY_DTYPES and leaf.numel() * leaf.element_size() <= place[1])


def write_into(slot: Optional[Slot], value: Any) -> Any:
    """``value`` with each tensor leaf that fits its place written into ``slot`` (as `InSlot`; the
    other leaves as they are), or None where no tensor could go there (all by value)."""
    if slot is None:
        return None
    parts = leaves(value)
    if len(parts) != len(slot.places) or not any(_fits(leaf, place) for leaf, place in zip(parts, slot.places)):
        return None
    buf = _open(slot)
    if buf is None:
        return None
    places = iter(slot.places)

    def write(leaf: Any) -> Any:
        place = next(places)
        if not _fits(leaf, place):
            return leaf
        nbytes = leaf.numel() * leaf.element_size()
        dtype = np.dtype(NUMPY_DTYPES[leaf.dtype])
        target = np.frombuffer(buf, np.uint8, nbytes, place[0]).view(dtype).reshape(tuple(leaf.shape))
        torch.from_numpy(target).copy_(leaf.detach())
        return InSlot(place[0], tuple(leaf.shape), dtype.name)
    return map_leaves(write, value)


# ----------------------------------------------------------------- the parent's side
class _Segment:
    """A file in ``/dev/shm`` holding one group of rows, mapped; registered with multiprocessing's
    resource tracker, so a parent killed before `SlotLender.close` leaves no file behind.

    ``view`` is the file as one uint8 tensor while the group is lent; every tensor received from it
    is a view of it, and the group is free again when the last of them (and ``view``) is gone.
    """

    def __init__(self, size: int) -> None:
        self.path = os.path.join(_SHM, f"distrib-{os.getpid()}-{secrets.token_hex(8)}")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)  # a full /dev/shm fails here, not later as SIGBUS
            self.map = mmap.mmap(fd, size)
        except BaseException:
            os.unlink(self.path)
            raise
        finally:
            os.close(fd)
        resource_tracker.register("/" + os.path.basename(self.path), "shared_memory")
        self.size = size
        self.view: Optional[torch.Tensor] = None
        self.out = 0          # rows lent and not yet received or given back
        self.sealed = False   # no more rows will be lent from this group

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            return
        resource_tracker.unregister("/" + os.path.basename(self.path), "shared_memory")


class SlotLender:
    """The parent's slots: rows of groups lent by element number, a group back when its tensors die.

    Args:
        max_bytes: room for all files together (default: half of ``/dev/shm``'s free space).
        rows: elements per group (the batch size after the map; 1 without a batch).
    """

    def __init__(self, max_bytes: Optional[int] = None, rows: int = 1) -> None:
        self._rows = max(1, int(rows))
        self._places: Optional[List[Optional[Tuple[int, int]]]] = None  # per leaf: (region start, row bytes)
        self._size = 0                      # bytes per group file; 0 until `learn` (results go by value)
        self._free: List[_Segment] = []
        self._all: Dict[str, _Segment] = {}
        self._open: Dict[int, _Segment] = {}  # group number -> its file, while rows are lent from it
        self._lock = threading.RLock()  # re-entrant: a finalizer may run (cyclic GC) while it is held
        self._max_bytes = max_bytes if max_bytes is not None else _half_free_shm()
        self._closed = False

    def learn(self, leaf_bytes: Sequence[Optional[int]]) -> None:
        """Lay groups out for elements whose leaves take ``leaf_bytes`` (None: not a tensor); once."""
        if self._places is not None or not any(leaf_bytes):
            return
        rows = self._rows
        if rows > 1 and rows * sum(b or 0 for b in leaf_bytes) * _GROUP_SHARE > self._max_bytes:
            rows = self._rows = 1  # a group this large would crowd /dev/shm: a slot per element
        places: List[Optional[Tuple[int, int]]] = []
        offset = 0
        for nbytes in leaf_bytes:
            if not nbytes:
                places.append(None)
                continue
            row = int(nbytes) if rows > 1 else aligned(int(nbytes * 1.25))  # rows adjacent, or room to vary
            places.append((offset, row))
            offset = aligned(offset + rows * row)
        self._places, self._size = places, max(_ROUND, -(-offset // _ROUND) * _ROUND)

    def lend(self, number: int) -> Optional[Slot]:
        """Row ``number % rows`` of group ``number // rows`` (a free file, or a new one while room is
        left), or None (the element goes by value). Numbers must not decrease."""
        if self._places is None or self._closed:
            return None
        group, row = divmod(int(number), self._rows)
        with self._lock:
            segment = self._open.get(group)
            if segment is None:
                for earlier in [g for g in self._open if g < group]:
                    self._seal(self._open.pop(earlier))
                segment = self._free.pop() if self._free else None
                if segment is None and (len(self._all) + 1) * self._size <= self._max_bytes:
                    segment = self._create()
                if segment is None:
                    return None
                self._start(segment)
                self._open[group] = segment
            segment.out += 1
        places = tuple(None if p is None else (p[0] + row * p[1], p[1]) for p in self._places)
        return Slot(segment.path, self._size, places)

    def _create(self) -> Optional[_Segment]:
        try:
            segment = _Segment(self._size)
        except OSError:
            self._max_bytes = len(self._all) * self._size  # no more: by value from now on
            return None
        self._all[segment.path] = segment
        return segment

    def _start(self, segment: _Segment) -> None:
        array = np.frombuffer(segment.map, np.uint8, segment.size)
        segment.view, segment.out, segment.sealed = torch.from_numpy(array), 0, False
        address = array.ctypes.data
        batch_buffers.lend_rows(address)
        weakref.finalize(array, self._all_views_gone, segment, address)

    def _seal(self, segment: _Segment) -> None:
        segment.sealed = True
        if segment.out == 0:
            segment.view = None  # the group is free once the tensors on it die

    def _row_back(self, segment: _Segment) -> None:
        with self._lock:
            segment.out -= 1
            if segment.out == 0 and segment.sealed:
                segment.view = None

    def _all_views_gone(self, segment: _Segment, address: int) -> None:
        batch_buffers.rows_returned(address)
        with self._lock:
            if not self._closed:
                self._free.append(segment)

    def give_back(self, slot: Optional[Slot]) -> None:
        """A lent slot whose element came back by value (or as an error)."""
        segment = None if slot is None else self._all.get(slot.name)
        if segment is not None:
            self._row_back(segment)

    def receive(self, slot: Slot, value: Any) -> Any:
        """The worker's ``value`` with each `InSlot` a tensor viewing the slot (no copy)."""
        segment = self._all[slot.name]
        group = segment.view
        assert group is not None, "a row received from a group that is not lent"

        def view(leaf: Any) -> Any:
            if type(leaf) is not InSlot:
                return leaf
            dtype = _TORCH_DTYPES[leaf.dtype]
            nbytes = int(np.prod(leaf.shape, dtype=np.int64)) * np.dtype(leaf.dtype).itemsize
            return group[leaf.offset:leaf.offset + nbytes].view(dtype).view(leaf.shape)
        out = map_leaves(view, value)
        self._row_back(segment)
        return out

    def close(self) -> None:
        """Unlink every file (a mapping still viewed by tensors stays valid until those die)."""
        with self._lock:
            self._closed = True
            segments, self._all, self._free, self._open = list(self._all.values()), {}, [], {}
        for segment in segments:
            segment.view = None
            segment.unlink()


def _half_free_shm() -> int:
    try:
        stats = os.statvfs(_SHM)
    except OSError:
        return 0
    return stats.f_bavail * stats.f_frsize // 2
