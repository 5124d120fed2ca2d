"""torchmetrics metrics in ``compile(metrics=[...])``: `TorchMetric` makes one a distrib `Metric`.

A ``torchmetrics.Metric`` given to ``compile`` (or to `distrib.metrics.get`)
is wrapped so that:

* it is called in torchmetrics' order, ``metric.update(preds, target)``
  (Keras calls metrics with ``(y_true, y_pred)``);
* it accumulates over the epoch (its own ``update``), and the logged value is
  its ``compute()`` over everything seen since the last reset — never a mean
  of per-batch values;
* its state is reduced across replicas by distrib, not by torchmetrics' own
  ``torch.distributed`` sync: every state tensor is summed with the loss and
  the other metrics in the loop's single all-reduce (and merged on the chief
  under the parameter server), then ``compute()`` runs on the summed state —
  the value one process gets on the global data;
* it is reset at the start of every epoch (``metric.reset()``).

Only metrics whose states all reduce by summing (``dist_reduce_fx="sum"``:
accuracy, precision, recall, F-scores, confusion matrices, MSE/MAE, mean
metrics, thresholded AUROC/AUPRC ...) can be reduced this way; a metric that
keeps lists of predictions (``"cat"``, e.g. ``BinaryAUROC()`` without
``thresholds``) or a max/min/mean state is refused with one error line.
Sample weights are not passed to torchmetrics (most of its metrics take
none): a weighted batch is an error.

Example:
    >>> import torchmetrics
    >>> model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy",
    ...               metrics=[torchmetrics.classification.MulticlassAccuracy(num_classes=10)])
    >>> model.fit(dataset, epochs=2)      # logs "multiclass_accuracy", the epoch's global accuracy
"""
from __future__ import annotations

import copy
import sys
from typing import Any, Dict, Optional

import torch

from distrib.metrics.base import Metric, snake_case

__all__ = ["TorchMetric", "is_torchmetric"]


def is_torchmetric(obj: Any) -> bool:
    """Whether ``obj`` is a ``torchmetrics.Metric`` (without importing torchmetrics)."""
    module = sys.modules.get("torchmetrics")
    return module is not None and isinstance(obj, module.Metric)


def _sum_reduced(metric: Any) -> Dict[str, torch.Tensor]:
    """The metric's state tensors by name; an error naming any state that does not reduce by summing."""
    from torchmetrics.utilities.data import dim_zero_sum

    states = {}
    for name, default in metric._defaults.items():
        reduce = metric._reductions.get(name)
        if not isinstance(default, torch.Tensor) or reduce is not dim_zero_sum:
            how = "a list (dist_reduce_fx='cat')" if isinstance(default, list) else \
                f"dist_reduce_fx={getattr(reduce, '__name__', reduce)!r}"
            raise ValueError(
                f"torchmetrics metric {type(metric).__name__} keeps state {name!r} as {how}; distrib reduces "
                "metric state across replicas by summing, so only metrics whose states are sums can be used "
                "in compile(metrics=...) (for AUROC/AUPRC pass thresholds=..., or use distrib.metrics.AUC)")
        states[name] = default
    return states


def _no_own_sync(metric: Any) -> None:
    # torchmetrics would all-gather its state over torch.distributed on compute(); distrib has summed it already.
    metric.sync_on_compute = False
    metric._to_sync = False


class TorchMetric(Metric):
    """A ``torchmetrics.Metric`` as a distrib `Metric` (see the module docstring).

    Args:
        metric: the torchmetrics metric (it is moved to the strategy's device and used in place).
        name: the log name (default: the class name in snake case, ``"multiclass_accuracy"``).
    """

    def __init__(self, metric: Any, name: Optional[str] = None) -> None:
        super().__init__(name or snake_case(type(metric).__name__))
        _sum_reduced(metric)
        self.metric = metric.to(self._strategy.device)
        _no_own_sync(self.metric)
        self._state_names = list(metric._defaults)
        higher = metric.higher_is_better  # torchmetrics.Metric's class attribute: None unless the metric says
        self.direction = None if higher is None else ("up" if higher else "down")
        self._scratch: Optional[Any] = None

    def state_tensors(self) -> Dict[str, torch.Tensor]:
        return {n: getattr(self.metric, n) for n in self._state_names}

    def reset_state(self) -> None:
        self.metric.reset()

    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Optional[Any] = None) -> None:
        if sample_weight is not None:
            raise ValueError(f"torchmetrics metric {self.name!r} takes no sample_weight; drop the sample weights "
                             "or use a distrib.metrics metric")
        pred = y_pred if isinstance(y_pred, torch.Tensor) else torch.as_tensor(y_pred)
        target = y_true if isinstance(y_true, torch.Tensor) else torch.as_tensor(y_true)
        if self.metric.device != pred.device:
            self.metric.to(pred.device)
        self.metric.update(pred.detach(), target.to(pred.device))

    def result_from_states(self, states: Dict[str, torch.Tensor]) -> torch.Tensor:
        if self._scratch is None:
            self._scratch = copy.deepcopy(self.metric)
            _no_own_sync(self._scratch)
        scratch = self._scratch
        scratch.reset()
        for name, value in states.items():
            live = getattr(self.metric, name)
            setattr(scratch, name, value.to(device=live.device, dtype=live.dtype).reshape(live.shape))
        scratch._update_count = max(int(self.metric._update_count), 1)
        scratch._computed = None
        return torch.as_tensor(scratch.compute())

    def get_config(self) -> Dict[str, Any]:
        raise ValueError(f"metric {self.name!r} wraps the torchmetrics metric {type(self.metric).__name__}, which "
                         "cannot be saved in a model config; compile it again after loading")
