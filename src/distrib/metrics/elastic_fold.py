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

The same fold runs before each elastic snapshot (`ElasticCollective.add_snapshot_listener`): a
replacement restores one survivor's snapshot, which then holds no other replica's sums, and it
zeros its own after loading it. Every replica keeps the folded totals with its snapshot
(`snapshot_extra`), so a replacement of replica 0 itself (the chief, replaced like any worker
under ``distrib launch``) puts them back (`restored`), whichever survivor sent the snapshot.

Example (3 replicas counted 4, 5 and 3 examples; worker 1 leaves):
    fold -> replica 0: 12, replicas 1 and 2: 0; the job goes on with 2 replicas, result() still over 12
"""
from __future__ import annotations

import logging
import weakref
from typing import Any, List, Optional

import torch

from distrib.comm.collective import ReduceOp
from distrib.comm.elastic_abilities import elastic_abilities
from distrib.metrics.packing import pack, unpack

__all__ = ["MetricFold", "register_for_resizes"]

log = logging.getLogger("distrib.metrics")

_folds: "weakref.WeakKeyDictionary[Any, MetricFold]" = weakref.WeakKeyDictionary()


class MetricFold:
    """The metrics of one collective, folded onto replica 0 before workers leave (see module docstring).

    Metrics are held weakly, in registration order (the program's, the same
    on every replica): one the program dropped is freed when its last
    reference goes, at the same point of the program on every replica, so a
    replacement that never made the metrics of earlier epochs folds the same
    list. Should the lists still differ in size, the fold is skipped with a
    warning rather than sending mismatched all-reduces.
    """

    def __init__(self, collective: Any) -> None:
        self._collective = collective
        self._refs: List["weakref.ref[Any]"] = []  # distrib.metrics.Metric objects
        self._totals: Optional[torch.Tensor] = None  # the sums the last fold before a snapshot moved to replica 0

    def add(self, metric: Any) -> None:
        self._refs.append(weakref.ref(metric))

    @property
    def metrics(self) -> List[Any]:
        """The registered metrics still alive, in registration order."""
        alive = [m for m in (r() for r in self._refs) if m is not None]
        self._refs = [weakref.ref(m) for m in alive]
        return alive

    def before_snapshot(self) -> None:
        """Fold every replica's sums onto replica 0 (collective): the snapshot then holds no other replica's."""
        self._totals = self([])

    def snapshot_extra(self) -> Optional[torch.Tensor]:
        """The totals the fold before this snapshot gave replica 0 (every replica knows them), or None."""
        return self._totals

    def restored(self, totals: Optional[torch.Tensor] = None) -> None:
        """In a replacement that loaded a survivor's snapshot: zero the sums, or, on replica 0, set the
        ``totals`` kept with that snapshot.

        The snapshot was taken right after `before_snapshot`, when only replica 0 held sums (a
        metric the program's checkpoint holds was just loaded with the survivor's values).
        """
        metrics = self.metrics
        if self._collective.rank != 0:
            for metric in metrics:
                metric.reset_state()
            return
        if totals is None:
            return  # no fold was kept with the snapshot: its values stand
        states = [m.state_tensors() for m in metrics]
        size = sum(t.numel() for s in states for t in s.values())
        if totals.numel() != size:
            log.warning("distrib: the metrics differ from the snapshot's (%d to %d state values): the chief's "
                        "replacement starts them from zero", size, totals.numel())
            for metric in metrics:
                metric.reset_state()
            return
        _unpack_into(states, totals)

    def __call__(self, leaving: List[bool]) -> Optional[torch.Tensor]:
        """Fold (collective); returns the totals replica 0 now holds (None if the metrics differ)."""
        states = [m.state_tensors() for m in self.metrics]
        flat = torch.cat([pack(s).cpu() for s in states]) if states else torch.zeros(0, dtype=torch.float64)
        n = float(flat.numel())
        sizes = self._collective.control_all_reduce(torch.tensor([n, -n], dtype=torch.float64), ReduceOp.MAX)
        if float(sizes[0]) != -float(sizes[1]):
            log.warning("distrib: the replicas hold different metrics (%d to %d state values): metric sums "
                        "of leaving workers are not kept", int(-float(sizes[1])), int(float(sizes[0])))
            return None
        if not flat.numel():
            return None
        summed = self._collective.all_reduce(flat, ReduceOp.SUM)
        _unpack_into(states, summed if self._collective.rank == 0 else torch.zeros_like(summed))
        return summed.clone()


def _unpack_into(states: List[Any], flat: torch.Tensor) -> None:
    """Write ``flat`` (the packed states of every metric, in order) into the metrics' state tensors."""
    offset = 0
    for s in states:
        n = sum(t.numel() for t in s.values())
        for name, value in unpack(flat[offset:offset + n], s).items():
            s[name].copy_(value.to(s[name].dtype))
        offset += n


def register_for_resizes(metric: Any) -> None:
    """Fold ``metric`` with the others of its strategy's collective when workers leave (elastic only)."""
    collective = elastic_abilities(metric.distribute_strategy.collective)
    if collective is None:
        return
    fold = _folds.get(collective)
    if fold is None:
        fold = _folds[collective] = MetricFold(collective)
        collective.add_resize_listener(fold)
        collective.add_snapshot_listener(fold)
    fold.add(metric)
