"""What one replica reads each step, under each sharding policy.

An input pipeline belongs to a worker task (see `InputPlacement`): each step
the task's pipeline yields one *group*, one item per local replica, and every
local replica process computes the same group (the pipeline is deterministic
given the agreed seed) and keeps its own item. An item is an element, or
`EMPTY` when the step exists but this replica has nothing in it (it then gets
a zero-row batch); a group of None is the end of the task's data.

- `SliceFeed` (DATA): every worker walks the same global stream of batches
  (planned as indices, so this is cheap); replica ``i`` of the job takes the
  ``i``-th of ``num_replicas`` even, contiguous slices of each.
- `PieceFeed` (OFF, and FILE on a worker's own files): each batch of the
  task's stream is cut into ``num_replicas`` pieces of the per-replica batch
  size, filled in order, so a partial batch fills the first pieces and leaves
  the rest empty; empty pieces are skipped and each step takes the next
  ``num_local_replicas`` pieces.
- `LocalFeed` (``distribute_datasets_from_function``): the task's own
  elements, ``num_local_replicas`` per step.

This is tf.distribute's behaviour, recorded from TensorFlow 2.21 in
``tests/data/tf_reference``. A feed's ``next()`` returns an element not yet
materialized (a lazy batch is gathered only by the iterator, after slicing).
Its ``state()`` is JSON-able and its constructor restores it.

Example (MirroredStrategy with 2 devices, ``range(10).batch(4)``):
    DATA: [0, 1] | [2, 3], [4, 5] | [6, 7], [8] | [9]
    OFF:  [0, 1] | [2, 3], [4, 5] | [6, 7], [8, 9] | (empty)
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Type

from distrib.data.batch_split import piece_bounds, split_bounds
from distrib.data.blocks import element_size, slice_element
from distrib.data.dataset import Dataset
from distrib.data.distribution.input_context import InputPlacement
from distrib.data.iterator import DatasetIterator
from distrib.data.options import INFINITE, UNKNOWN
from distrib.data.distribution.sharding import Sharding
from distrib.data.stream import IterContext

__all__ = ["Feed", "SliceFeed", "PieceFeed", "LocalFeed", "EMPTY", "FEEDS"]

_log = logging.getLogger("distrib.data")
_WHAT = "a global batch of the distributed dataset"

#: The step exists, but this replica's part of it is empty.
EMPTY = object()


class Feed:
    """One replica's stream of per-replica elements."""

    #: Size of the global batch the last element came from, where this feed knows it.
    global_size: Optional[int] = None
    #: The global batch's row where this replica's last element starts, where this feed knows it.
    first_row: Optional[int] = None

    def __init__(self, dataset: Dataset, ctx: IterContext, placement: InputPlacement,
                 state: Optional[dict] = None) -> None:
        self._dataset = dataset
        self._p = placement
        self._n = placement.num_replicas_in_sync
        self._local = placement.num_local_replicas
        self._it = DatasetIterator(dataset, ctx)
        if state is not None:
            self._it.load_state_dict(state["it"])

    def next_group(self) -> Optional[List[Any]]:
        """The next step's items, one per local replica; None at the end."""
        raise NotImplementedError

    def reshard(self, placement: InputPlacement) -> None:
        """The job changed size: from the next step, take this replica's share under ``placement``."""
        self._p = placement
        self._n = placement.num_replicas_in_sync
        self._local = placement.num_local_replicas

    def next(self) -> Any:
        """This replica's item of the next step (an element or `EMPTY`), None at the end."""
        group = self.next_group()
        return None if group is None else group[self._p.local_replica_id]

    def state(self) -> dict:
        return {"it": self._it.state_dict()}

    def steps(self) -> int:
        """Steps this feed yields per pass (a count, `INFINITE` or `UNKNOWN`)."""
        return self._dataset.cardinality()


class SliceFeed(Feed):
    """DATA: replica ``r``'s contiguous slice of every global batch."""

    def next_group(self) -> Optional[List[Any]]:
        element = self._it.next_element()
        if element is None:
            self.global_size = None
            return None
        self.global_size = element_size(element, _WHAT)
        if self._n == 1:
            self.first_row = 0
            return [element]
        first = self._p.local_ranks[0]
        bounds = [split_bounds(self.global_size, self._n, first + j) for j in range(self._local)]
        self.first_row = bounds[self._p.local_replica_id][0]
        return [slice_element(element, lo, hi) for lo, hi in bounds]


class PieceFeed(Feed):
    """OFF / FILE: every batch cut into ``num_replicas`` pieces filled in order, one per local replica a step.

    The position inside the current batch is an example offset, so a state
    saved with ``n`` replicas continues correctly with any other number.
    """

    def __init__(self, dataset: Dataset, ctx: IterContext, placement: InputPlacement,
                 state: Optional[dict] = None) -> None:
        self._cur: Any = None
        self._size = 0
        self._offset = 0
        self._nominal = int(state.get("nominal", 0)) if state else 0
        self._before: Optional[dict] = None
        super().__init__(dataset, ctx, placement,
                         {"it": state["it"]} if state and state.get("it") else None)
        if state is not None and state.get("before") is not None:
            self._it.load_state_dict(state["before"])
            self._load()
            self._offset = int(state["offset"])

    def _load(self) -> bool:
        self._before = self._it.state_dict()
        self._cur = self._it.next_element()
        if self._cur is None:
            return False
        self._size = element_size(self._cur, _WHAT)
        self._nominal = max(self._nominal, self._size)  # the batch size, unless every batch is partial
        self._offset = 0
        return True

    def _next_piece(self) -> Any:
        while True:
            while self._cur is None or self._offset >= self._size:
                if not self._load():
                    return None
            for index in range(self._n):
                lo, hi = piece_bounds(self._size, self._nominal, self._n, index)
                if hi > self._offset:  # (lo < offset only after a restore onto another replica count)
                    lo, self._offset = max(lo, self._offset), hi
                    return slice_element(self._cur, lo, hi)
            self._offset = self._size

    def next_group(self) -> Optional[List[Any]]:
        first = self._next_piece()
        if first is None:
            return None
        group = [first]
        for _ in range(self._local - 1):
            piece = self._next_piece()
            group.append(EMPTY if piece is None else piece)
        return group

    def state(self) -> dict:
        if self._cur is None or self._offset >= self._size:
            return {"it": self._it.state_dict(), "before": None, "nominal": self._nominal}
        return {"it": None, "before": self._before, "offset": self._offset, "nominal": self._nominal}

    def steps(self) -> int:
        n = self._dataset.cardinality()
        return n if n in (INFINITE, 0) else UNKNOWN


class LocalFeed(Feed):
    """The task's own elements (per-replica batches already), one per local replica a step."""

    def next_group(self) -> Optional[List[Any]]:
        first = self._it.next_element()
        if first is None:
            return None
        group = [first]
        for _ in range(self._local - 1):
            element = self._it.next_element()
            group.append(EMPTY if element is None else element)
        return group

    def steps(self) -> int:
        n = self._dataset.cardinality()
        return n if n < 0 else -(-n // self._local)


#: The feed that reads each `Sharding`.
FEEDS: Dict[Sharding, Type[Feed]] = {Sharding.DATA: SliceFeed, Sharding.OFF: PieceFeed, Sharding.FILE: PieceFeed,
                                     Sharding.LOCAL: LocalFeed}
