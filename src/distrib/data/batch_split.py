"""The global batch and its per-replica parts: the one place that computes either from the other.

A **global batch** is what one synchronous step consumes across all
``num_replicas_in_sync`` replicas; each replica gets a **per-replica batch**.

- `per_replica_batch_size`: the nominal per-replica size of a global batch
  size (``global // replicas``, an error when it does not divide): what a
  dataset function batches by, and what ``fit(batch_size=...)`` must allow.
- `split_bounds`: the rows of replica ``r`` when a global batch is split
  evenly (DATA sharding: the first ``size % replicas`` replicas get one more).
- `piece_bounds`: the rows of piece ``r`` when a task's batch is cut into
  pieces of the nominal per-replica size, filled in order (OFF / FILE).
- `global_batch_size`: the size of the global batch a replica's batch came
  from, what losses are divided by: planned without communication where every
  worker reads the same global stream, else the replicas' rows summed.

Example (3 replicas; a global batch of 12 rows, then the last one of 10):
    >>> per_replica_batch_size(12, 3)
    4
    >>> [split_bounds(10, 3, r) for r in range(3)]          # DATA: 4, 3 and 3 rows
    [(0, 4), (4, 7), (7, 10)]
    >>> [piece_bounds(10, 12, 3, r) for r in range(3)]      # OFF / FILE: 4, 4 and 2 rows
    [(0, 4), (4, 8), (8, 10)]
    >>> global_batch_size(torch.zeros(3, 5), planned=10, collective=None, num_replicas=3)
    10
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple

import torch

from distrib.comm.collective import ReduceOp
from distrib.utils.nest import flatten

if TYPE_CHECKING:  # pragma: no cover
    from distrib.comm.collective import Collective

__all__ = ["per_replica_batch_size", "split_bounds", "piece_bounds", "global_batch_size", "leading_rows"]


def per_replica_batch_size(global_size: int, num_replicas: int, what: Optional[str] = None) -> int:
    """``global_size // num_replicas``; one error line naming ``what`` when it does not divide.

    Args:
        global_size: rows in a global batch.
        num_replicas: replicas in sync.
        what: how the error names the size (default ``"global batch size <n>"``).
    """
    if global_size % num_replicas:
        lo = global_size - global_size % num_replicas
        hi = lo + num_replicas
        near = f"{lo} or {hi}" if lo > 0 else f"{hi}"
        raise ValueError(f"{what or f'global batch size {global_size}'} does not divide by "
                         f"num_replicas_in_sync={num_replicas}: use a multiple of {num_replicas} (e.g. {near})")
    return global_size // num_replicas


def split_bounds(size: int, parts: int, index: int) -> Tuple[int, int]:
    """The ``[lo, hi)`` rows of part ``index`` when ``size`` rows are split evenly into ``parts``."""
    base, extra = divmod(size, parts)
    lo = index * base + min(index, extra)
    return lo, lo + base + (1 if index < extra else 0)


def piece_bounds(size: int, nominal: int, parts: int, index: int) -> Tuple[int, int]:
    """Rows ``[lo, hi)`` of piece ``index`` when a batch of ``size`` rows (normally ``nominal``) is cut.

    Pieces have the sizes of an even split of ``nominal`` and are filled in
    order, so a partial batch leaves the last pieces short or empty.
    """
    lo, hi = split_bounds(max(size, nominal), parts, index)
    return min(lo, size), min(hi, size)


def leading_rows(batch: Any, missing: str = "a batch has no tensor with a batch dimension; batch the dataset "
                                             "(.batch(global_batch_size))") -> int:
    """Rows of a batch: the leading dimension of its first tensor that has one (``missing``: the error if none)."""
    for t in flatten(batch):
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            return int(t.shape[0])
    raise ValueError(missing)


def global_batch_size(batch: Any, planned: Optional[int], collective: Optional["Collective"],
                      num_replicas: int, multi_replica: Optional[bool] = None) -> int:
    """Rows in the global batch this replica's ``batch`` belongs to.

    Args:
        batch: this replica's batch.
        planned: the global size where the input knows it without asking
            (every worker plans the same global batches), else None.
        collective: sums the replicas' rows when ``planned`` is None and there
            are several replicas: then every replica must call this.
        num_replicas: replicas in sync.
        multi_replica: whether the replicas sum their rows (default: several replicas; an elastic
            job of one does too, as a job of several would).
    """
    if planned is not None:
        return int(planned)
    rows = leading_rows(batch)
    if not (num_replicas > 1 if multi_replica is None else multi_replica):
        return rows
    total = collective.control_all_reduce(torch.tensor([rows], dtype=torch.int64), ReduceOp.SUM)
    return int(total.reshape(-1)[0].item())
