"""Regression metrics: running MSE, RMSE, MAE, MAPE, MSLE, log-cosh error and cosine similarity.

Example:
    >>> m = MeanSquaredError()
    >>> m.update_state(torch.tensor([[0.0, 1.0], [0.0, 0.0]]), torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    >>> m.local_result()
    tensor(0.2500)
    >>> r = RootMeanSquaredError()
    >>> r.update_state(torch.tensor([0.0, 0.0]), torch.tensor([3.0, 4.0]))
    >>> r.local_result()                     # sqrt((9 + 16) / 2)
    tensor(3.5355)
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from distrib.losses import regression as reg
from distrib.metrics.reduction import Mean, MeanMetricWrapper

__all__ = ["MeanSquaredError", "MeanAbsoluteError", "RootMeanSquaredError", "MeanAbsolutePercentageError",
           "MeanSquaredLogarithmicError", "LogCoshError", "CosineSimilarity", "cosine_similarity"]


class MeanSquaredError(MeanMetricWrapper):
    """Keras's ``MeanSquaredError`` metric: mean over examples of ``mean((y_true - y_pred)**2, -1)``."""

    direction = "down"

    def __init__(self, name: str = "mean_squared_error", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(reg.mean_squared_error, name, dtype)


class MeanAbsoluteError(MeanMetricWrapper):
    """Keras's ``MeanAbsoluteError`` metric: mean over examples of ``mean(abs(y_true - y_pred), -1)``."""

    direction = "down"

    def __init__(self, name: str = "mean_absolute_error", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(reg.mean_absolute_error, name, dtype)


class MeanAbsolutePercentageError(MeanMetricWrapper):
    """Keras's ``MeanAbsolutePercentageError`` metric."""

    direction = "down"

    def __init__(self, name: str = "mean_absolute_percentage_error", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(reg.mean_absolute_percentage_error, name, dtype)


class MeanSquaredLogarithmicError(MeanMetricWrapper):
    """Keras's ``MeanSquaredLogarithmicError`` metric."""

    direction = "down"

    def __init__(self, name: str = "mean_squared_logarithmic_error", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(reg.mean_squared_logarithmic_error, name, dtype)


class LogCoshError(MeanMetricWrapper):
    """Keras's ``LogCoshError`` metric."""

    direction = "down"

    def __init__(self, name: str = "logcosh", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(reg.log_cosh, name, dtype)


def cosine_similarity(y_true: Any, y_pred: Any, axis: int = -1) -> torch.Tensor:
    """The cosine similarity along ``axis`` (the metric's sign: 1 is identical)."""
    return -reg.cosine_similarity(y_true, y_pred, axis)


class CosineSimilarity(MeanMetricWrapper):
    """Keras's ``CosineSimilarity`` metric (the similarity, not the loss's negative)."""

    direction = "up"

    def __init__(self, name: str = "cosine_similarity", dtype: Optional[torch.dtype] = None, axis: int = -1) -> None:
        super().__init__(cosine_similarity, name, dtype, axis=int(axis))


class RootMeanSquaredError(Mean):
    """Keras's ``RootMeanSquaredError``: the square root of the weighted mean of squared errors."""

    direction = "down"

    def __init__(self, name: str = "root_mean_squared_error", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(name, dtype)

    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Optional[Any] = None) -> None:
        true, pred = reg.aligned(y_true, y_pred)
        squared = reg.broadcast_error(self.name, true, pred, lambda: (pred - true).square())
        super().update_state(squared, sample_weight=sample_weight)

    def result_from_states(self, states: Dict[str, torch.Tensor]) -> torch.Tensor:
        return super().result_from_states(states).sqrt()
