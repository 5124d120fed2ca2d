"""Keras's ``R2Score``: the coefficient of determination of ``(batch, outputs)`` regression.

Per output it keeps the weighted sums of ``y``, ``y**2``, squared residuals
and weights (created at the first update), all summed across replicas, so
the global score equals the score of the pooled data.

Example:
    >>> m = R2Score()
    >>> m.update_state([[1.0], [2.0], [3.0]], [[1.0], [2.0], [4.0]])
    >>> m.local_result()                 # 1 - 1 / 2
    tensor(0.5000)
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, Optional

import torch

from distrib.losses.base import as_tensor_pair
from distrib.losses.reduction import match_ranks
from distrib.metrics.base import Metric

__all__ = ["R2Score"]


class R2Score(Metric):
    """Keras's ``R2Score``.

    Args:
        class_aggregation: ``"uniform_average"``, ``"variance_weighted_average"`` or None (one score per output).
        num_regressors: for the adjusted R2 (0: plain R2).
        name: the metric's name.
        dtype: dtype of the result.
    """

    direction = "up"
    builds_state_on_first_update = True

    def __init__(self, class_aggregation: Optional[str] = "uniform_average", num_regressors: int = 0,
                 name: str = "r2_score", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(name, dtype)
        if class_aggregation not in (None, "uniform_average", "variance_weighted_average"):
            raise ValueError(f"R2Score: class_aggregation={class_aggregation!r} is not one of None, "
                             "'uniform_average', 'variance_weighted_average'")
        if int(num_regressors) < 0:
            raise ValueError(f"R2Score: num_regressors must be >= 0, got {num_regressors}")
        self.class_aggregation, self.num_regressors = class_aggregation, int(num_regressors)
        self.add_state("num_samples")

    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Optional[Any] = None) -> None:
        true, pred = match_ranks(*as_tensor_pair(y_true, y_pred))
        if pred.dim() != 2 or true.dim() != 2:
            raise ValueError(f"R2Score expects inputs of shape (batch_size, output_dim), got y_true "
                             f"{tuple(true.shape)} and y_pred {tuple(pred.shape)}")
        if "sum" not in self._state_names:
            for state in ("squared_sum", "sum", "total_mse", "count"):
                self.add_state(state, (int(pred.shape[-1]),))
            true, pred = true.to(torch.float64), pred.to(torch.float64)
        w = torch.ones((), dtype=torch.float64, device=true.device) if sample_weight is None else torch.as_tensor(
            sample_weight).to(torch.float64)
        if w.dim() == 1:
            w = w.unsqueeze(1)
        if w.device != true.device:
            w = w.to(true.device)
        w = w.broadcast_to(true.shape)
        self._align_device(true)
        self.sum.add_((true * w).sum(0))
        self.squared_sum.add_((true * true * w).sum(0))
        self.total_mse.add_(((true - pred) ** 2 * w).sum(0))
        self.count.add_(w.sum(0))
        self.num_samples.add_(true.numel())

    def result_from_states(self, states: Dict[str, torch.Tensor]) -> torch.Tensor:
        if "sum" not in states:
            return torch.zeros((), dtype=torch.float64)
        mean = states["sum"] / states["count"]
        total = states["squared_sum"] - states["sum"] * mean
        raw = 1.0 - states["total_mse"] / total
        raw = torch.where(torch.isinf(raw), torch.zeros_like(raw), raw)
        if self.class_aggregation == "uniform_average":
            score = raw.mean()
        elif self.class_aggregation == "variance_weighted_average":
            score = (total * raw).sum() / total.sum()
        else:
            score = raw
        if self.num_regressors:
            n, p = float(states["num_samples"]), float(self.num_regressors)
            if p >= n - 1:
                warnings.warn("R2Score: too few samples for the adjusted R2 score; returning the plain R2 score",
                              stacklevel=2)
            else:
                score = 1.0 - (1.0 - score) * (n - 1.0) / (n - p - 1.0)
        return score

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), "class_aggregation": self.class_aggregation,
                "num_regressors": self.num_regressors}
