"""A model's restorable state: module, optimizer and metric states; weights as numpy arrays.

``Model.state_dict()`` holds tensors and plain values only (what
`distrib.checkpoint.files.format` saves without pickle)::

    {"module": module.state_dict(), "optimizer": optimizer.state_dict() or None,
     "metrics": {"loss": {...}, "<metric name>": {...}}, "metrics_aggregated": bool}

Metric states are sums over examples. Each replica holds its own; with
``aggregate_metrics=True`` (a collective) they are summed over replicas, and
restoring such a state gives replica 0 the sums and the others zeros, so
every worker again reports the same global values after a resume.

Example (2 replicas; replica 0 saw 3 of 4 right, replica 1 1 of 4):
    >>> state = model.state_dict(aggregate_metrics=True)   # accuracy state: total 4, count 8
    >>> model.load_state_dict(state)    # replica 0: total 4, count 8; replica 1: zeros
    >>> model.compute_logs()["accuracy"]                    # still 0.5 on both
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List

import numpy as np
import torch

from distrib.checkpoint.files.inplace_restore import verbatim_tensors
from distrib.checkpoint.optimizer_state import check_optimizer_state
from distrib.comm.collective import ReduceOp
from distrib.utils.nest import map_structure

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy
    from distrib.training.execution.trainer_state import TrainerState

__all__ = ["model_state_dict", "load_model_state", "verbatim_model_tensors", "fold_metrics", "apply_metric_state", "get_weights", "set_weights"]


def _metric_state(metric: Any, strategy: "Strategy", aggregate: bool) -> Any:
    if not hasattr(metric, "state_dict"):
        return None
    state = metric.state_dict()
    if not aggregate or not strategy.multi_replica:
        return state

    def reduce(v: Any) -> Any:  # metric states are sums over examples: summing replicas is exact
        return strategy.reduce(ReduceOp.SUM, v, axis=None).cpu() if isinstance(v, torch.Tensor) else v
    return map_structure(reduce, state)


def _zeroed(state: Any) -> Any:
    return map_structure(lambda v: torch.zeros_like(v) if isinstance(v, torch.Tensor) else v, state)


def model_state_dict(loop: "TrainerState", aggregate_metrics: bool = False) -> Dict[str, Any]:
    """See `Model.state_dict`."""
    strategy = loop.strategy
    metrics: Dict[str, Any] = {"loss": loop.loss_tracker.state_dict(aggregate=aggregate_metrics)}
    for _, name, metric in (loop.compiled_metrics.entries if loop.compiled_metrics else []):
        metrics[name] = _metric_state(metric, strategy, aggregate_metrics)
    optimizer = loop.torch_optimizer
    return {
        "module": loop.module.state_dict(),
        "optimizer": None if optimizer is None else optimizer.state_dict(),
        "metrics": metrics,
        "metrics_aggregated": bool(aggregate_metrics and strategy.multi_replica),
    }


def verbatim_model_tensors(loop: "TrainerState") -> List[torch.Tensor]:
    """See `Model.tensors_restored_verbatim`."""
    optimizer = loop.torch_optimizer
    return verbatim_tensors(loop.module) + ([] if optimizer is None else verbatim_tensors(optimizer))


def fold_metrics(loop: "TrainerState") -> None:
    """Move every replica's metric sums onto replica 0, zeros elsewhere (a collective; the logs do not change).

    Called before workers leave an elastic job, so their share of the
    epoch's metrics stays in the job.
    """
    strategy = loop.strategy
    metrics: Dict[str, Any] = {"loss": loop.loss_tracker.state_dict(aggregate=True)}
    for _, name, metric in (loop.compiled_metrics.entries if loop.compiled_metrics else []):
        metrics[name] = _metric_state(metric, strategy, True)
    apply_metric_state(loop, {"metrics": metrics, "aggregated": strategy.multi_replica})


def load_model_state(loop: "TrainerState", state: Dict[str, Any]) -> None:
    """See `Model.load_state_dict`."""
    loop.module.load_state_dict(state["module"])
    if state.get("optimizer") is not None:
        if loop.torch_optimizer is None:
            raise RuntimeError("load_state_dict: the state holds optimizer state but the model is not "
                               "compiled; call model.compile(...) before restoring")
        check_optimizer_state(loop.torch_optimizer, state["optimizer"])
        loop.torch_optimizer.load_state_dict(state["optimizer"])
    if state.get("metrics") is not None:
        apply_metric_state(loop, {"metrics": state["metrics"],
                                   "aggregated": bool(state.get("metrics_aggregated", False))})


def apply_metric_state(loop: "TrainerState", saved: Dict[str, Any]) -> None:
    """Restore metric states now, or hold them in ``loop.metric_restore`` until the metrics are built.

    Metrics are built on the first batch (multi-output models), and compile
    makes new ones: both take the held state with ``loop.metric_restore.apply``.
    """
    zero = saved["aggregated"] and loop.strategy.replica_id != 0
    states = saved["metrics"]
    if "loss" in states:
        loop.loss_tracker.load_state_dict(states["loss"], zero=zero)
    compiled = loop.compiled_metrics
    if compiled is not None and not compiled.built:
        loop.metric_restore.hold(saved)
        return
    loop.metric_restore.hold(None)
    for _, name, metric in (compiled.entries if compiled is not None else []):
        if states.get(name) is not None and hasattr(metric, "load_state_dict"):
            metric.load_state_dict(_zeroed(states[name]) if zero else states[name])


def get_weights(module: torch.nn.Module) -> List[np.ndarray]:
    """The module's parameters and buffers as numpy arrays, in ``state_dict`` order."""
    return [t.detach().cpu().numpy().copy() for t in module.state_dict().values()]


def set_weights(module: torch.nn.Module, weights: List[Any]) -> None:
    """Set parameters and buffers from `get_weights`'s list (same order and shapes)."""
    current = module.state_dict()
    if len(weights) != len(current):
        raise ValueError(f"set_weights: got {len(weights)} arrays but the module has {len(current)} "
                         "parameters and buffers; pass a list from get_weights()")
    new = {}
    for (key, old), value in zip(current.items(), weights):
        t = torch.as_tensor(np.asarray(value))
        if tuple(t.shape) != tuple(old.shape):
            raise ValueError(f"set_weights: {key} needs shape {tuple(old.shape)}, got {tuple(t.shape)}")
        new[key] = t.to(old.dtype)
    module.load_state_dict(new)
