"""Where a replica's batch sits in its global batch, for layers that key on an example's global place.

A distributed iterator that slices one global batch among the replicas (DATA
sharding) knows, for each batch it yields, the row of the global batch its
first row is: it records that with `note`. `Strategy.run` looks the position
up for the batch it was given (`find`) and makes it current for the step
function (`set_current`), so that a layer can ask `current()` which global
rows its input holds (`distrib.strategies.layer_patches.global_dropout`). The record is
weak: it goes away with the batch's tensors.

Example (3 replicas, a global batch of 10 rows; replica 1 holds rows 4..6):
    >>> note(batch, 4)                     # batch: a tuple of tensors of 3 rows
    >>> set_current(find((batch,)))
    >>> current()
    RowPosition(first_row=4, rows=3)
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch

from distrib.utils.nest import flatten

__all__ = ["RowPosition", "note", "find", "set_current", "current"]


@dataclass(frozen=True)
class RowPosition:
    """A replica's batch is rows ``first_row .. first_row + rows - 1`` of its global batch."""

    first_row: int
    rows: int


_lock = threading.Lock()
_positions: Dict[int, Tuple["weakref.ref[torch.Tensor]", RowPosition]] = {}


_current: Optional[RowPosition] = None


def _forget(key: int) -> None:
    with _lock:
        _positions.pop(key, None)


def _leading(value: Any) -> Optional[torch.Tensor]:
    for leaf in flatten(value):
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return leaf
    return None


def note(batch: Any, first_row: int) -> None:
    """Record that ``batch`` starts at global row ``first_row``, for as long as it lives.

    The record is keyed on the batch's first tensor with a batch dimension;
    a batch without one (strings only) is not recorded.
    """
    tensor = _leading(batch)
    if tensor is None:
        return
    position = RowPosition(int(first_row), int(tensor.shape[0]))
    key = id(tensor)
    ref = weakref.ref(tensor, lambda _ref, key=key: _forget(key))
    with _lock:
        _positions[key] = (ref, position)


def find(value: Any) -> Optional[RowPosition]:
    """The recorded position of the first noted tensor among ``value``'s leaves, else None."""
    for leaf in flatten(value):
        if not isinstance(leaf, torch.Tensor):
            continue
        with _lock:
            entry = _positions.get(id(leaf))
        if entry is not None and entry[0]() is leaf:
            return entry[1]
    return None


def set_current(position: Optional[RowPosition]) -> None:
    """Make ``position`` the current batch's (`Strategy.run` does, before each step function).

    It stays current after the step function returns, process-wide: a
    backward pass that recomputes a checkpointed forward (in another thread on
    a GPU, or after ``run`` returned) must see the position the forward saw.
    """
    global _current
    _current = position


def current() -> Optional[RowPosition]:
    """The position of the batch the running (or last) step function was given, or None (unknown)."""
    return _current
