"""Keras's segmentation losses, Dice and Tversky: one minus an overlap ratio of labels and predictions.

With ``axis=None`` (Keras's default) the ratio is taken over the whole batch,
one number; with ``axis=[1, 2]`` (say) one per example.

Example:
    >>> dice(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0]]))
    tensor(0.)
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import torch

from distrib.losses.base import FunctionLoss
from distrib.losses.reduction import Reduction
from distrib.losses.regression import EPSILON, aligned, broadcast_error

__all__ = ["dice", "tversky", "Dice", "Tversky"]

Axis = Union[None, int, Sequence[int]]


def _sum(x: torch.Tensor, axis: Axis) -> torch.Tensor:
    if axis is None:
        return x.sum()
    return x.sum(dim=tuple(axis) if isinstance(axis, (list, tuple)) else int(axis))


def dice(y_true: Any, y_pred: Any, axis: Axis = None) -> torch.Tensor:
    """``1 - 2 * sum(y_true * y_pred) / (sum(y_true) + sum(y_pred) + eps)`` over ``axis``."""
    true, pred = aligned(y_true, y_pred)

    def fn() -> torch.Tensor:
        inter = _sum(true * pred, axis)
        return 1.0 - 2.0 * inter / (_sum(true, axis) + _sum(pred, axis) + EPSILON)
    return broadcast_error("dice", true, pred, fn)


def tversky(y_true: Any, y_pred: Any, alpha: float = 0.5, beta: float = 0.5, axis: Axis = None) -> torch.Tensor:
    """``1 - tp / (tp + alpha * fp + beta * fn + eps)`` over ``axis`` (soft counts)."""
    true, pred = aligned(y_true, y_pred)

    def fn() -> torch.Tensor:
        tp = _sum(true * pred, axis)
        fp = _sum((1.0 - pred) * true, axis)
        fn_ = _sum(pred * (1.0 - true), axis)
        return 1.0 - tp / (tp + fp * alpha + fn_ * beta + EPSILON)
    return broadcast_error("tversky", true, pred, fn)


def _axis(axis: Axis) -> Axis:
    return list(axis) if isinstance(axis, (list, tuple)) else axis


class Dice(FunctionLoss):
    """Keras's ``Dice`` loss."""

    default_name = "dice"
    fn = staticmethod(dice)

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None, axis: Axis = None) -> None:
        super().__init__(reduction, name, axis=_axis(axis))


class Tversky(FunctionLoss):
    """Keras's ``Tversky`` loss (``alpha`` weighs false positives, ``beta`` false negatives)."""

    default_name = "tversky"
    fn = staticmethod(tversky)

    def __init__(self, alpha: float = 0.5, beta: float = 0.5, reduction: Any = Reduction.AUTO,
                 name: Optional[str] = None, axis: Axis = None) -> None:
        super().__init__(reduction, name, alpha=float(alpha), beta=float(beta), axis=_axis(axis))
