"""Global results of many metrics with ONE collective.

Calling ``m.result()`` on each of k metrics costs k all-reduces; `global_results`
packs every metric's state into one flat float64 tensor and reduces it once.
It is a collective whenever the strategy has several replicas: every worker
must call it with the same metrics in the same order.

Example:
    >>> loss_mean, acc = distrib.metrics.Mean("loss"), distrib.metrics.SparseCategoricalAccuracy()
    >>> ...                                            # update_state every step
    >>> global_results([loss_mean, acc])               # one all-reduce
    {'loss': tensor(0.5400), 'sparse_categorical_accuracy': tensor(0.8300)}
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Sequence

import torch

from distrib.comm.collective import ReduceOp
from distrib.metrics.base import Metric
from distrib.metrics.packing import pack, packed_size, unpack

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["global_results"]


def global_results(metrics: Sequence[Metric], strategy: "Optional[Strategy]" = None) -> Dict[str, torch.Tensor]:
    """``{metric.name: global result}`` for ``metrics``, with one all-reduce in all.

    Args:
        metrics: the metrics; names must be unique.
        strategy: whose replicas to aggregate over; defaults to the first
            metric's ``distribute_strategy``.

    Returns:
        The results in the order of ``metrics`` (each in its metric's dtype).
    """
    metrics = list(metrics)
    names = [m.name for m in metrics]
    if len(set(names)) != len(names):
        raise ValueError(f"metric names must be unique to aggregate them, got {names}")
    if not metrics:
        return {}
    strategy = strategy if strategy is not None else metrics[0].distribute_strategy
    if not strategy.multi_replica:
        return {m.name: m.local_result() for m in metrics}
    states = [m.state_tensors() for m in metrics]
    packs = [pack(s) for s in states]
    flat = torch.cat([p.to(packs[0].device) for p in packs])
    summed = strategy.reduce(ReduceOp.SUM, flat, axis=None)
    out: Dict[str, torch.Tensor] = {}
    offset = 0
    for m, s in zip(metrics, states):
        n = packed_size(s)
        out[m.name] = m.result_from_states(unpack(summed[offset:offset + n], s)).to(m.dtype)
        offset += n
    return out
