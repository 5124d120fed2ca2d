"""Keras's ``FBetaScore`` and ``F1Score`` for multi-label / one-hot predictions ``(batch, classes)``.

Predictions are positive above ``threshold``; with ``threshold=None`` the
largest prediction of each row is the positive one. Weighted per-class true
positives, false positives and false negatives are summed (across replicas
too); ``average`` is None (one score per class), ``"micro"`` (pooled counts),
``"macro"`` (mean of class scores) or ``"weighted"`` (mean weighted by each
class's weighted label count). The state is created at the first update,
when the number of classes is known.

Example:
    >>> f1 = F1Score(average="micro", threshold=0.5)
    >>> f1.update_state([[1, 0], [0, 1]], [[0.9, 0.2], [0.6, 0.4]])
    >>> f1.local_result()
    tensor(0.5000)
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from distrib.losses.base import as_tensor_pair
from distrib.metrics.base import Metric

__all__ = ["FBetaScore", "F1Score"]

_EPSILON = 1e-7


class FBetaScore(Metric):
    """Keras's ``FBetaScore``.

    Args:
        average: None, ``"micro"``, ``"macro"`` or ``"weighted"``.
        beta: weight of recall against precision (> 0).
        threshold: in ``(0, 1]``, or None for "the row's maximum is positive".
        name: the metric's name.
        dtype: dtype of the result.
    """

    direction = "up"
    builds_state_on_first_update = True

    def __init__(self, average: Optional[str] = None, beta: float = 1.0, threshold: Optional[float] = None,
                 name: str = "fbeta_score", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(name, dtype)
        if average not in (None, "micro", "macro", "weighted"):
            raise ValueError(f"{type(self).__name__}: average={average!r} is not one of None, 'micro', 'macro', "
                             "'weighted'")
        if float(beta) <= 0.0:
            raise ValueError(f"{type(self).__name__}: beta must be > 0, got {beta}")
        if threshold is not None and not 0.0 < float(threshold) <= 1.0:
            raise ValueError(f"{type(self).__name__}: threshold must satisfy 0 < threshold <= 1, got {threshold}")
        self.average, self.beta = average, float(beta)
        self.threshold = None if threshold is None else float(threshold)

    def _build(self, num_classes: int) -> None:
        shape = () if self.average == "micro" else (num_classes,)
        for state in ("true_positives", "false_positives", "false_negatives", "intermediate_weights"):
            self.add_state(state, shape)

    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Optional[Any] = None) -> None:
        true, pred = as_tensor_pair(y_true, y_pred)
        if pred.dim() != 2 or tuple(true.shape) != tuple(pred.shape):
            raise ValueError(f"{type(self).__name__}: expects labels and predictions of shape (batch, classes), got "
                             f"{tuple(true.shape)} and {tuple(pred.shape)}")
        if "true_positives" not in self._state_names:
            self._build(int(pred.shape[1]))
        if self.threshold is None:
            hit = (pred >= pred.amax(dim=-1, keepdim=True)) & (pred.abs() > 1e-9)
        else:
            hit = pred > self.threshold
        p, t = hit.to(torch.float64), true.to(torch.float64)
        w = None if sample_weight is None else torch.as_tensor(sample_weight, device=pred.device).to(
            torch.float64).reshape(-1, 1)
        dims = None if self.average == "micro" else 0

        def total(values: torch.Tensor) -> torch.Tensor:
            values = values if w is None else values * w
            return values.sum() if dims is None else values.sum(dim=dims)
        self._align_device(p)
        self.true_positives.add_(total(p * t))
        self.false_positives.add_(total(p * (1.0 - t)))
        self.false_negatives.add_(total((1.0 - p) * t))
        self.intermediate_weights.add_(total(t))

    def result_from_states(self, states: Dict[str, torch.Tensor]) -> torch.Tensor:
        if "true_positives" not in states:
            return torch.zeros((), dtype=torch.float64)
        tp, fp, fn = states["true_positives"], states["false_positives"], states["false_negatives"]
        precision = tp / (tp + fp + _EPSILON)
        recall = tp / (tp + fn + _EPSILON)
        b2 = self.beta ** 2
        score = (precision * recall) / (b2 * precision + recall + _EPSILON) * (1.0 + b2)
        if self.average == "weighted":
            weights = states["intermediate_weights"]
            return (score * weights / (weights.sum() + _EPSILON)).sum()
        if self.average is not None:
            return score.mean()
        return score

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), "average": self.average, "beta": self.beta, "threshold": self.threshold}


class F1Score(FBetaScore):
    """Keras's ``F1Score``: `FBetaScore` with ``beta=1``."""

    def __init__(self, average: Optional[str] = None, threshold: Optional[float] = None, name: str = "f1_score",
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(average, 1.0, threshold, name, dtype)

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.pop("beta")
        return config
