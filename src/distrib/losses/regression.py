"""Regression losses, averaged over the last axis like Keras: MSE, MAE, MAPE, MSLE, Huber, LogCosh, CosineSimilarity.

Labels and predictions are brought to the same rank when they differ by a
trailing axis of size 1 (``[B]`` against ``[B, 1]``) and then broadcast like
Keras (``[B, 1]`` targets against ``[B, 10]`` outputs compare every output
with its example's target). Rank-1 inputs average the whole batch into one
value, as Keras does.

Example:
    >>> mean_squared_error(torch.tensor([[0.0, 0.0]]), torch.tensor([[1.0, 3.0]]))
    tensor([5.])
    >>> MeanSquaredError(reduction="sum")(torch.tensor([0.0, 0.0]), torch.tensor([1.0, 3.0]))
    tensor(5.)
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from distrib.losses.base import FunctionLoss, as_tensor_pair
from distrib.losses.reduction import Reduction, match_ranks

__all__ = ["EPSILON", "aligned", "broadcast_error", "mean_squared_error", "mean_absolute_error",
           "mean_absolute_percentage_error", "mean_squared_logarithmic_error", "huber", "log_cosh",
           "cosine_similarity", "MeanSquaredError", "MeanAbsoluteError", "MeanAbsolutePercentageError",
           "MeanSquaredLogarithmicError", "Huber", "LogCosh", "CosineSimilarity"]

#: Keras's ``backend.epsilon()``.
EPSILON = 1e-7


def aligned(y_true: Any, y_pred: Any) -> tuple:
    """Both as tensors of the predictions' float dtype, ranks matched like Keras."""
    true, pred = match_ranks(*as_tensor_pair(y_true, y_pred))
    return true.to(pred.dtype), pred


def broadcast_error(who: str, true: torch.Tensor, pred: torch.Tensor, fn: Callable[[], torch.Tensor]
                    ) -> torch.Tensor:
    """``fn()``, with a shape mismatch turned into one line naming both shapes."""
    try:
        return fn()
    except IndexError as err:
        raise ValueError(f"{who}: inputs of shape {tuple(true.shape)} and {tuple(pred.shape)}: {err}") from None
    except RuntimeError as err:
        if "size of tensor" not in str(err) and "shape" not in str(err):
            raise
        raise ValueError(f"{who}: y_true of shape {tuple(true.shape)} does not broadcast against y_pred of "
                         f"shape {tuple(pred.shape)}; give targets shaped like the model's output") from None


def _elementwise_mean(who: str, y_true: Any, y_pred: Any,
                      fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    true, pred = aligned(y_true, y_pred)
    return broadcast_error(who, true, pred, lambda: fn(true, pred).mean(dim=-1))


def mean_squared_error(y_true: Any, y_pred: Any) -> torch.Tensor:
    """``mean((y_true - y_pred) ** 2, axis=-1)``."""
    return _elementwise_mean("mean_squared_error", y_true, y_pred, lambda t, p: (t - p).square())


def mean_absolute_error(y_true: Any, y_pred: Any) -> torch.Tensor:
    """``mean(abs(y_true - y_pred), axis=-1)``."""
    return _elementwise_mean("mean_absolute_error", y_true, y_pred, lambda t, p: (t - p).abs())


def mean_absolute_percentage_error(y_true: Any, y_pred: Any) -> torch.Tensor:
    """``100 * mean(abs((y_true - y_pred) / max(abs(y_true), eps)), axis=-1)``."""
    return 100.0 * _elementwise_mean("mean_absolute_percentage_error", y_true, y_pred,
                                     lambda t, p: ((t - p) / t.abs().clamp(min=EPSILON)).abs())


def mean_squared_logarithmic_error(y_true: Any, y_pred: Any) -> torch.Tensor:
    """``mean((log(max(y_pred, eps) + 1) - log(max(y_true, eps) + 1)) ** 2, axis=-1)``."""
    return _elementwise_mean(
        "mean_squared_logarithmic_error", y_true, y_pred,
        lambda t, p: (torch.log(p.clamp(min=EPSILON) + 1.0) - torch.log(t.clamp(min=EPSILON) + 1.0)).square())


def huber(y_true: Any, y_pred: Any, delta: float = 1.0) -> torch.Tensor:
    """Quadratic for ``|error| <= delta``, linear beyond; mean over the last axis."""
    def fn(t: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        error = p - t
        absolute = error.abs()
        return torch.where(absolute <= delta, 0.5 * error.square(), delta * absolute - 0.5 * delta ** 2)
    return _elementwise_mean("huber", y_true, y_pred, fn)


def log_cosh(y_true: Any, y_pred: Any) -> torch.Tensor:
    """``mean(log(cosh(y_pred - y_true)), axis=-1)``, computed without overflow."""
    return _elementwise_mean("log_cosh", y_true, y_pred,
                             lambda t, p: (p - t) + F.softplus(-2.0 * (p - t)) - math.log(2.0))


def cosine_similarity(y_true: Any, y_pred: Any, axis: int = -1) -> torch.Tensor:
    """Minus the cosine similarity along ``axis`` (-1 is identical, 1 opposite)."""
    true, pred = aligned(y_true, y_pred)

    def unit(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.square().sum(dim=axis, keepdim=True)).clamp(max=1.0 / EPSILON)
    return broadcast_error("cosine_similarity", true, pred, lambda: -(unit(true) * unit(pred)).sum(dim=axis))


class MeanSquaredError(FunctionLoss):
    """Keras's ``MeanSquaredError`` loss (``"mse"``)."""

    default_name = "mean_squared_error"
    fn = staticmethod(mean_squared_error)

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name)


class MeanAbsoluteError(FunctionLoss):
    """Keras's ``MeanAbsoluteError`` loss (``"mae"``)."""

    default_name = "mean_absolute_error"
    fn = staticmethod(mean_absolute_error)

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name)


class MeanAbsolutePercentageError(FunctionLoss):
    """Keras's ``MeanAbsolutePercentageError`` loss (``"mape"``)."""

    default_name = "mean_absolute_percentage_error"
    fn = staticmethod(mean_absolute_percentage_error)

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name)


class MeanSquaredLogarithmicError(FunctionLoss):
    """Keras's ``MeanSquaredLogarithmicError`` loss (``"msle"``)."""

    default_name = "mean_squared_logarithmic_error"
    fn = staticmethod(mean_squared_logarithmic_error)

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name)


class Huber(FunctionLoss):
    """Keras's ``Huber`` loss with threshold ``delta``."""

    default_name = "huber_loss"
    fn = staticmethod(huber)

    def __init__(self, delta: float = 1.0, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name, delta=float(delta))


class LogCosh(FunctionLoss):
    """Keras's ``LogCosh`` loss."""

    default_name = "log_cosh"
    fn = staticmethod(log_cosh)

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name)


class CosineSimilarity(FunctionLoss):
    """Keras's ``CosineSimilarity`` loss along ``axis``."""

    default_name = "cosine_similarity"
    fn = staticmethod(cosine_similarity)

    def __init__(self, axis: int = -1, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name, axis=int(axis))
