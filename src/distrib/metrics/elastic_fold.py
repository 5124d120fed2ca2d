"""An elastic job that loses workers keeps their share of every metric's sums.

Metric states are sums over the examples each replica saw. When workers
leave a running elastic job (`distrib.comm.elastic.resize`), their sums would
leave with them and the next `Metric.result` would miss those examples. So
every metric bound to an elastic strategy is registered, at construction,
with one `MetricFold` per collective, which the collective calls on every
member before anyone leaves: one all-reduce of all registered metrics'
states over the old membership, after which replica 0 holds the sums and
every other replica zeros, so ``result()`` is unchanged and nothing is lost.
(`fit` folds its own metrics and loss the same way; folding twice changes
nothing.)

Example (3 replicas counted 4, 5 and 3 examples; worker 1 leaves):
    fold -> replica 0: 12, replicas 1 and 2: 0; the job goes on with 2 replicas, result() still over 12
"""
from __future__ import annotations

import weakref
from typing import Any, List

import torch

from distrib.comm.collective import ReduceOp
from distrib.metrics.packing import pack, unpack

__all__ = ["MetricFold", "register_for_resizes"]

_folds: "weakref.WeakKeyDictionary[Any, MetricFold]" = weakref.WeakKeyDictionary()


class MetricFold:
    """The metrics of one collective, folded onto replica 0 before workers leave (see module docstring).

    Metrics are held for the collective's life (registration order is the
    program's, the same on every replica, so the one all-reduce matches).
    """

    def __init__(self, collective: Any) -> None:
        self._collective = collective
        self.metrics: List[Any] = []  # distrib.metrics.Metric objects

    def __call__(self, leaving: List[bool]) -> None:
        states = [m.state_tensors() for m in self.metrics]
        if not any(states):
            return
        flat = torch.cat([pack(s).cpu() for s in states])
        summed = self._collective.all_reduce(flat, ReduceOp.SUM)
        if self._collective.rank != 0:
            summed = torch.zeros_like(summed)
        offset = 0
        for s in states:
            n = sum(t.numel() for t in s.values())
            for name, value in unpack(summed[offset:offset + n], s).items():
                s[name].copy_(value.to(s[name].dtype))
            offset += n


def register_for_resizes(metric: Any) -> None:
    """Fold ``metric`` with the others of its strategy's collective when workers leave (elastic only)."""
    collective = getattr(metric.distribute_strategy, "collective", None)
    if collective is None or not getattr(collective, "elastic", False):
        return
    fold = _folds.get(collective)
    if fold is None:
        fold = _folds[collective] = MetricFold(collective)
        collective.add_resize_listener(fold)
    fold.metrics.append(metric)
