"""A ``DataLoader``'s worker processes kept when distrib re-plans its batches.

A map-style loader handed to distrib (``as_dataset``, ``fit``,
``experimental_distribute_dataset``) becomes lazy batches of the indices its
batch sampler chose (`distrib.data.distribution.adapters`), so a replica fetches only its
rows. With ``num_workers > 0`` those rows are fetched by a new ``DataLoader``
over the same dataset with the user's ``num_workers``, ``collate_fn``,
``pin_memory``, ``prefetch_factor``, ``worker_init_fn``, ``timeout`` and
multiprocessing context, whose batch sampler is this replica's *plan*: its
slice of every remaining batch. Its workers run ahead exactly as the user's
loader would; a batch is taken from them when its rows are asked for in the
planned order, and fetched in this process otherwise (after a ``shuffle`` of
the batches, say), from then on.

Example:
    >>> loader = DataLoader(images, batch_size=64, shuffle=True, num_workers=4)
    >>> dist = strategy.experimental_distribute_dataset(loader)  # 2 replicas: 32 rows each,
    >>> next(iter(dist))                                          # read by 4 worker processes
"""
from __future__ import annotations

import functools
from collections import deque
from typing import Any, Callable, Deque, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils import data as tud

from distrib.data.batch_split import split_bounds
from distrib.data.blocks import Table
from distrib.data.structure import stack_structures, to_structure

__all__ = ["WorkerTable", "replica_plan"]


def replica_plan(batches: Sequence[List[int]], replica_slice: Optional[Tuple[int, int]]) -> List[List[int]]:
    """The index lists a replica gathers: its slice of each batch (all of it without a slice)."""
    if replica_slice is None or replica_slice[0] <= 1:
        return [list(b) for b in batches]
    n, r = replica_slice
    plan = []
    for b in batches:
        lo, hi = split_bounds(len(b), n, r)
        plan.append(list(b[lo:hi]))
    return plan


def _collate(user: Optional[Callable[[List[Any]], Any]], items: List[Any]) -> Any:
    """What `distrib.data.blocks.MapStyleTable.gather` makes of the items (module level: workers pickle it)."""
    if user is not None:
        return to_structure(user(items))
    return stack_structures([to_structure(item) for item in items])


def _worker_loader(loader: tud.DataLoader, plan: List[List[int]], collate: Optional[Callable],
                   seed: int) -> tud.DataLoader:
    extra = {"prefetch_factor": loader.prefetch_factor} if loader.num_workers > 0 else {}
    # its own generator: the workers' base seed must not be drawn from (and shift) torch's global one
    return tud.DataLoader(loader.dataset, batch_sampler=plan, num_workers=loader.num_workers,
                          generator=torch.Generator().manual_seed(seed),
                          collate_fn=functools.partial(_collate, collate), pin_memory=loader.pin_memory,
                          timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
                          multiprocessing_context=loader.multiprocessing_context,
                          persistent_workers=loader.persistent_workers, **extra)


class WorkerTable(Table):
    """``table``'s rows, gathered by the loader's worker processes when asked for in the planned order.

    Args:
        table: the loader's dataset as a table (the fallback, and ``row``).
        loader: the user's ``DataLoader`` (its settings are copied).
        plan: the index lists this consumer will gather, in order.
        collate: the loader's own ``collate_fn``, or None for the default.
        seed: seeds the worker loader's generator (the workers' base seed).
    """

    def __init__(self, table: Table, loader: tud.DataLoader, plan: List[List[int]],
                 collate: Optional[Callable], seed: int) -> None:
        self._table, self._loader, self._collate, self._seed = table, loader, collate, seed
        self._plan: Deque[List[int]] = deque(b for b in plan if b)
        self._batches: Optional[Iterator[Any]] = None
        self._off = not self._plan

    def __len__(self) -> int:
        return len(self._table)

    def row(self, i: int) -> Any:
        return self._table.row(i)

    def row_spec(self) -> Any:
        return self._table.row_spec()

    def gather(self, idx: np.ndarray) -> Any:
        if len(idx) and not self._off:
            if self._plan[0] == idx.tolist():
                if self._batches is None:  # started at the first gather: made and dropped iterators cost nothing
                    self._batches = iter(_worker_loader(self._loader, list(self._plan), self._collate, self._seed))
                self._plan.popleft()
                batch = next(self._batches)
                if not self._plan:
                    self.stop()
                return batch
            self.stop()  # not the planned order: this process fetches from now on
        return self._table.gather(idx)

    def stop(self) -> None:
        """Stop using the workers (their processes end with the loader's iterator)."""
        self._off, self._batches = True, None
        self._plan.clear()
