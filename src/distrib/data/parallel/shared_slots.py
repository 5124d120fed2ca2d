"""Shared-memory slots for worker-process results, lent by the parent and viewed in place.

A worker writes an element's tensors into a slot (a file in ``/dev/shm``)
and sends only where they lie; the parent wraps them without a copy. A slot
is lent again once the last tensor on it is freed, so a kept row is never
overwritten. What a slot cannot hold goes by value (docs/input-pipelines.md,
"Threads or processes").

Example (in the parent; ``write_into`` runs in the worker):
    >>> lender = SlotLender()
    >>> lender.learn(4096); slot = lender.lend()
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
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from distrib.data.batch_buffers import NUMPY_DTYPES
from distrib.data.structure import leaves, map_leaves

__all__ = ["SlotLender", "Slot", "write_into", "InSlot", "aligned"]

_ALIGN = 64
_SHM = "/dev/shm"
_ROUND = 64 * 1024



def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to the alignment each tensor in a slot starts at."""
    return -(-nbytes // _ALIGN) * _ALIGN


class Slot:
    """One lent slot: its file's path and size (what crosses the pipe with a task)."""

    __slots__ = ("name", "size")

    def __init__(self, name: str, size: int) -> None:
        self.name, self.size = name, size

    def __reduce__(self) -> Any:
        return (Slot, (self.name, self.size))


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


def write_into(slot: Optional[Slot], value: Any) -> Any:
    """``value`` with its CPU tensors written into ``slot`` (as `InSlot`), or None where they do not fit."""
    if slot is None:
        return None
    parts = leaves(value)
    offset, places = 0, []
    for leaf in parts:
        if type(leaf) is not torch.Tensor or leaf.device.type != "cpu" or leaf.dtype not in NUMPY_DTYPES:
            return None
        places.append(offset)
        offset += aligned(leaf.numel() * leaf.element_size())
    buf = _open(slot) if offset <= slot.size else None
    if buf is None:
        return None
    places_iter = iter(places)

    def write(leaf: Any) -> InSlot:
        at = next(places_iter)
        nbytes = leaf.numel() * leaf.element_size()
        dtype = np.dtype(NUMPY_DTYPES[leaf.dtype])
        target = np.frombuffer(buf, np.uint8, nbytes, at).view(dtype).reshape(tuple(leaf.shape))
        torch.from_numpy(target).copy_(leaf.detach())
        return InSlot(at, tuple(leaf.shape), dtype.name)
    return map_leaves(write, value)


# ----------------------------------------------------------------- the parent's side
class _Segment:
    """A file in ``/dev/shm`` of one slot's size, mapped; registered with multiprocessing's resource
    tracker, so a parent killed before `SlotLender.close` leaves no file behind."""

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

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            return
        resource_tracker.unregister("/" + os.path.basename(self.path), "shared_memory")


class SlotLender:
    """The parent's slots: lent one per element in flight, back when the tensors on them are freed."""

    def __init__(self, max_bytes: Optional[int] = None) -> None:
        self._size = 0                      # bytes per slot; 0 until `learn` (results go by value)
        self._free: List[_Segment] = []
        self._all: Dict[str, _Segment] = {}
        self._lock = threading.RLock()  # re-entrant: a finalizer may run (cyclic GC) while it is held
        self._max_bytes = max_bytes if max_bytes is not None else _half_free_shm()
        self._closed = False

    def learn(self, element_bytes: int) -> None:
        """Size slots for elements of ``element_bytes`` (the first results tell); once."""
        if self._size == 0 and element_bytes > 0:
            self._size = -(-int(element_bytes * 1.25) // _ROUND) * _ROUND

    def lend(self) -> Optional[Slot]:
        """A free slot, a new one while room is left, or None (the element goes by value)."""
        if self._size == 0 or self._closed:
            return None
        with self._lock:
            segment = self._free.pop() if self._free else None
            if segment is None and (len(self._all) + 1) * self._size <= self._max_bytes:
                segment = self._create()
        return None if segment is None else Slot(segment.path, self._size)

    def _create(self) -> Optional[_Segment]:
        try:
            segment = _Segment(self._size)
        except OSError:
            self._max_bytes = len(self._all) * self._size  # no more: by value from now on
            return None
        self._all[segment.path] = segment
        return segment

    def give_back(self, slot: Optional[Slot]) -> None:
        """A lent slot whose element never came back written (by value, or an error)."""
        segment = None if slot is None else self._all.get(slot.name)
        if segment is not None:
            self._release(segment)

    def _release(self, segment: _Segment) -> None:
        with self._lock:
            if not self._closed:
                self._free.append(segment)

    def receive(self, slot: Slot, value: Any) -> Any:
        """The worker's ``value`` with each `InSlot` a tensor viewing the slot (no copy)."""
        segment = self._all[slot.name]
        views = [0]

        def view(leaf: Any) -> Any:
            if type(leaf) is not InSlot:
                return leaf
            nbytes = int(np.prod(leaf.shape, dtype=np.int64)) * np.dtype(leaf.dtype).itemsize
            array = np.frombuffer(segment.map, np.uint8, nbytes, leaf.offset).view(leaf.dtype).reshape(leaf.shape)
            views[0] += 1
            weakref.finalize(array, self._one_view_gone, segment, views)
            return torch.from_numpy(array)
        out = map_leaves(view, value)
        if views[0] == 0:
            self._release(segment)
        return out

    def _one_view_gone(self, segment: _Segment, views: List[int]) -> None:
        with self._lock:
            views[0] -= 1
            done = views[0] == 0
        if done:
            self._release(segment)

    def close(self) -> None:
        """Unlink every segment (a mapping still viewed by tensors stays valid until those die)."""
        with self._lock:
            self._closed = True
            segments, self._all, self._free = list(self._all.values()), {}, []
        for segment in segments:
            segment.unlink()


def _half_free_shm() -> int:
    try:
        stats = os.statvfs(_SHM)
    except OSError:
        return 0
    return stats.f_bavail * stats.f_frsize // 2
