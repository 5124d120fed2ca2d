"""Global logs — loss and every metric — with ONE all-reduce.

The loss tracker's running total and the state tensors of every
`distrib.metrics.Metric` are packed into one flat float64 tensor, summed
across replicas once, and each value is computed from its summed state. A
metric object without ``state_tensors``/``result_from_states`` (a user's
Keras-like class) is asked for ``result()`` itself, in order, after the
packed reduction.

Example (2 replicas, one metric): one all-reduce of ``[loss_total, acc_total, acc_count]``:
    >>> global_logs(strategy, tracker, [("accuracy", acc)])
    {'loss': 0.54, 'accuracy': 0.83}
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Sequence, Tuple

import torch

from distrib.comm.collective import ReduceOp
from distrib.metrics.base import Metric

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["global_logs"]


def _packable(metric: Any) -> bool:
    """A distrib `Metric` (every compiled metric is one: `distrib.metrics.get` makes them): its
    state tensors are summed in the one all-reduce; anything else reports its own ``result()``."""
    return isinstance(metric, Metric)


def _value(result: Any) -> Any:
    if isinstance(result, torch.Tensor):
        return result.item() if result.numel() == 1 else result.detach().cpu().tolist()
    return float(result) if isinstance(result, (int, float)) else result


def global_logs(strategy: "Strategy", tracker: Any, metrics: Sequence[Tuple[str, Any]]) -> Dict[str, Any]:
    """``{"loss": ..., name: ...}``; a collective: every worker calls it with the same metrics."""
    packed: List[Tuple[str, Any, Dict[str, torch.Tensor]]] = []
    flats = [tracker.local_total().reshape(1)]
    for name, metric in metrics:
        if _packable(metric):
            states = metric.state_tensors()
            packed.append((name, metric, states))
            flats.extend(t.detach().reshape(-1).to(torch.float64) for t in states.values())
    device = flats[0].device
    flat = torch.cat([f.to(device) for f in flats])
    if strategy.multi_replica:
        flat = strategy.reduce(ReduceOp.SUM, flat, axis=None)
    logs: Dict[str, Any] = {"loss": tracker.mean_of(flat[0])}
    offset = 1
    for name, metric, states in packed:
        summed = {}
        for key, t in states.items():
            summed[key] = flat[offset:offset + t.numel()].reshape(t.shape)
            offset += t.numel()
        result = metric.result_from_states(summed)
        logs[name] = _value(result.to(metric.dtype) if isinstance(result, torch.Tensor) else result)
    for name, metric in metrics:
        if not _packable(metric):
            logs[name] = _value(metric.result())
    return {"loss": logs["loss"], **{name: logs[name] for name, _ in metrics}}
