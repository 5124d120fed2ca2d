"""`Precision` and `Recall` with Keras's numerics (thresholds, top_k, class_id).

As ``keras.metrics.Precision`` / ``Recall`` (Keras 3): a prediction counts as
positive at threshold ``t`` when ``y_pred > t`` (strictly); labels are
positive when non-zero. With ``top_k`` only the ``k`` largest predictions of
each row may be positive (the others are set to -1e10 first; the default
threshold is then -1e10, so the top k *are* the positives); ``class_id`` then
keeps one class column. The state is per threshold ``true_positives`` and
``false_positives`` (Precision) or ``false_negatives`` (Recall), summed
across replicas by `Metric.result`. The result is a scalar for one threshold
(even ``thresholds=[0.5]``) and a vector for several; 0 where undefined.

Example:
    >>> m = Precision()
    >>> m.update_state([0, 1, 1, 1], [1, 0, 1, 1])
    >>> m.local_result()
    tensor(0.6667)
    >>> r = Recall(top_k=1, class_id=2)
    >>> r.update_state([[0, 0, 1], [0, 0, 1]], [[0.1, 0.2, 0.7], [0.5, 0.4, 0.1]])
    >>> r.local_result()
    tensor(0.5000)
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

import torch

from distrib.metrics.base import Metric
from distrib.metrics.thresholds import aligned_inputs

__all__ = ["Precision", "Recall", "TruePositives", "TrueNegatives", "FalsePositives", "FalseNegatives",
           "confusion_counts"]

NEG_INF = -1e10


def _thresholds(thresholds: Union[None, float, Sequence[float]], top_k: Optional[int], who: str) -> List[float]:
    if thresholds is None:
        return [0.5 if top_k is None else NEG_INF]
    values = [float(thresholds)] if isinstance(thresholds, (int, float)) else [float(t) for t in thresholds]
    if not values or any(not 0.0 <= t <= 1.0 for t in values):
        raise ValueError(f"{who}: thresholds must be in [0, 1], got {thresholds!r}")
    return values


def confusion_counts(y_true: Any, y_pred: Any, thresholds: torch.Tensor, top_k: Optional[int],
                     class_id: Optional[int], sample_weight: Optional[Any],
                     who: str) -> Dict[str, torch.Tensor]:
    """Weighted ``tp``, ``fp``, ``fn``, ``tn`` per threshold (float64), Keras's update rule."""
    true, pred, weight = aligned_inputs(y_true, y_pred, sample_weight, who)
    if top_k is not None:
        if pred.dim() == 0 or int(top_k) < 1 or int(top_k) > pred.shape[-1]:
            raise ValueError(f"{who}: top_k={top_k} needs predictions with at least {top_k} classes in "
                             f"the last dimension, got shape {tuple(pred.shape)}")
        kth = pred.topk(int(top_k), dim=-1).indices
        keep = torch.zeros_like(pred, dtype=torch.bool).scatter_(-1, kth, True)
        pred = torch.where(keep, pred, torch.full_like(pred, NEG_INF))
    if class_id is not None:
        if pred.dim() == 0 or not 0 <= int(class_id) < pred.shape[-1]:
            raise ValueError(f"{who}: class_id={class_id} is outside the {tuple(pred.shape)[-1:]} classes "
                             f"of the predictions")
        pred, true = pred[..., int(class_id)], true[..., int(class_id)]
        weight = weight[..., int(class_id)]
    pred, positive = pred.reshape(-1), true.reshape(-1) != 0
    w = weight.reshape(-1)
    if thresholds.device != pred.device:
        thresholds = thresholds.to(pred.device)
    above = pred[None, :] > thresholds[:, None]
    return {"tp": ((above & positive) * w).sum(1), "fp": ((above & ~positive) * w).sum(1),
            "fn": ((~above & positive) * w).sum(1), "tn": ((~above & ~positive) * w).sum(1)}


class _Confusion(Metric):
    _second = ""

    def __init__(self, thresholds: Union[None, float, Sequence[float]] = None, top_k: Optional[int] = None,
                 class_id: Optional[int] = None, name: Optional[str] = None,
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(name, dtype)
        self.init_thresholds = thresholds
        self.top_k, self.class_id = top_k, class_id
        self.thresholds = _thresholds(thresholds, top_k, type(self).__name__)
        self._threshold_tensor = torch.tensor(self.thresholds, dtype=torch.float64)
        self.add_state("true_positives", (len(self.thresholds),))
        self.add_state(self._second, (len(self.thresholds),))

    direction = "up"

    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Optional[Any] = None) -> None:
        thresholds = self._constant_on("_threshold_tensor", y_pred)
        counts = confusion_counts(y_true, y_pred, thresholds, self.top_k, self.class_id, sample_weight,
                                  type(self).__name__)
        self._align_device(counts["tp"])
        self.true_positives.add_(counts["tp"].to(self.true_positives.dtype))
        other = getattr(self, self._second)
        other.add_(counts["fp" if self._second == "false_positives" else "fn"].to(other.dtype))

    def result_from_states(self, states: Dict[str, torch.Tensor]) -> torch.Tensor:
        tp = states["true_positives"]
        total = tp + states[self._second]
        value = torch.where(total != 0, tp / torch.where(total != 0, total, 1.0), 0.0)
        return value[0] if len(self.thresholds) == 1 else value

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), "thresholds": self.init_thresholds, "top_k": self.top_k,
                "class_id": self.class_id}


class Precision(_Confusion):
    """Keras's ``Precision``: ``tp / (tp + fp)`` per threshold."""

    _second = "false_positives"

    def __init__(self, thresholds: Union[None, float, Sequence[float]] = None, top_k: Optional[int] = None,
                 class_id: Optional[int] = None, name: Optional[str] = "precision",
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(thresholds, top_k, class_id, name, dtype)


class Recall(_Confusion):
    """Keras's ``Recall``: ``tp / (tp + fn)`` per threshold."""

    _second = "false_negatives"

    def __init__(self, thresholds: Union[None, float, Sequence[float]] = None, top_k: Optional[int] = None,
                 class_id: Optional[int] = None, name: Optional[str] = "recall",
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(thresholds, top_k, class_id, name, dtype)


class _Count(Metric):
    """The weighted count of one confusion-matrix cell per threshold (Keras's ``TruePositives`` ...)."""

    _key = ""

    def __init__(self, thresholds: Union[None, float, Sequence[float]] = None, name: Optional[str] = None,
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(name, dtype)
        self.init_thresholds = thresholds
        self.thresholds = _thresholds(thresholds, None, type(self).__name__)
        self._threshold_tensor = torch.tensor(self.thresholds, dtype=torch.float64)
        self.add_state("accumulator", (len(self.thresholds),))

    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Optional[Any] = None) -> None:
        thresholds = self._constant_on("_threshold_tensor", y_pred)
        counts = confusion_counts(y_true, y_pred, thresholds, None, None, sample_weight, type(self).__name__)
        self._align_device(counts[self._key])
        self.accumulator.add_(counts[self._key].to(self.accumulator.dtype))

    def result_from_states(self, states: Dict[str, torch.Tensor]) -> torch.Tensor:
        value = states["accumulator"]
        return value[0] if len(self.thresholds) == 1 else value.clone()

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), "thresholds": self.init_thresholds}


class TruePositives(_Count):
    """Keras's ``TruePositives``: weighted count of positives predicted above each threshold."""

    _key = "tp"
    direction = "up"


class TrueNegatives(_Count):
    """Keras's ``TrueNegatives``: weighted count of negatives predicted at or below each threshold."""

    _key = "tn"
    direction = "up"


class FalsePositives(_Count):
    """Keras's ``FalsePositives``: weighted count of negatives predicted above each threshold."""

    _key = "fp"
    direction = "down"


class FalseNegatives(_Count):
    """Keras's ``FalseNegatives``: weighted count of positives predicted at or below each threshold."""

    _key = "fn"
    direction = "down"
