"""`LossTracker`: the epoch's mean loss, accumulated without a host sync per step.

Each replica adds ``replica_loss * global_batch_size`` to a tensor on its
device (`update`); the loop counts the step's global examples once
(`count_step`, plain integers identical on every worker). `result` sums the
tensor across replicas (one all-reduce) and divides by the examples seen, so
the value is the mean of the per-step global losses weighted by global batch
size — what one process would report.

Example (one replica, two steps of 4 and 2 examples with losses 1.0 and 4.0):
    >>> t = LossTracker(strategy)
    >>> t.update(torch.tensor(1.0), 4); t.count_step(4)
    >>> t.update(torch.tensor(4.0), 2); t.count_step(2)
    >>> t.result()
    2.0
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

import torch

from distrib.comm.collective import ReduceOp

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["LossTracker"]


class LossTracker:
    """Batch-size-weighted mean of global step losses; `result` is a collective."""

    def __init__(self, strategy: "Strategy") -> None:
        self._strategy = strategy
        self._total: Optional[torch.Tensor] = None
        self._count = 0

    def reset_state(self) -> None:
        self._total = None
        self._count = 0

    def update(self, replica_loss: torch.Tensor, global_batch_size: int) -> None:
        """Add a replica's share of one step's global loss (called once per replica)."""
        loss = replica_loss.detach()
        if self._total is None:
            self._total = torch.zeros((), dtype=torch.float64, device=loss.device)
        elif self._total.device != loss.device:
            self._total = self._total.to(loss.device)
        self._total.add_(loss, alpha=global_batch_size)  # one kernel, accumulated in float64

    def count_step(self, global_batch_size: int) -> None:
        """Count one step's global examples (called once per step, however many replicas ran it)."""
        self._count += int(global_batch_size)

    @property
    def count(self) -> int:
        """Global examples accumulated since the last reset (identical on every worker)."""
        return self._count

    def local_total(self) -> torch.Tensor:
        """This replica's running sum of ``loss * global_batch_size`` (float64, no communication)."""
        return self._total if self._total is not None else torch.zeros((), dtype=torch.float64)

    def mean_of(self, global_total: torch.Tensor) -> float:
        """The mean loss given the total summed over replicas."""
        return float(global_total) / self._count if self._count else 0.0

    def result(self) -> float:
        """The global weighted mean loss; all replicas must call it together."""
        return self.mean_of(self._strategy.reduce(ReduceOp.SUM, self.local_total(), axis=None))

    def state_dict(self, aggregate: bool = False) -> Dict[str, Any]:
        """Local state; with ``aggregate`` (a collective) the global sum, to restore on replica 0."""
        total = self._total if self._total is not None else torch.zeros((), dtype=torch.float64)
        total = total.detach().to(torch.float64).cpu()
        if aggregate:
            total = self._strategy.reduce(ReduceOp.SUM, total, axis=None).cpu()
        return {"total": total.clone(), "count": torch.tensor(self._count, dtype=torch.int64)}

    def load_state_dict(self, state: Dict[str, Any], zero: bool = False) -> None:
        """Restore; ``zero`` keeps only the count (replicas other than 0 after an aggregated save)."""
        total = torch.as_tensor(state["total"], dtype=torch.float64)
        device = self._strategy.device
        self._total = torch.zeros((), dtype=torch.float64, device=device) if zero else total.to(device)
        self._count = int(torch.as_tensor(state["count"]))

