"""Keras's focal cross-entropies: cross-entropy down-weighting the examples already classified well.

``focal = (1 - p_t) ** gamma * crossentropy``, where ``p_t`` is the
probability given to the true label; ``gamma=0`` is the plain cross-entropy
(times ``alpha`` for the categorical one).

Example:
    >>> binary_focal_crossentropy(torch.tensor([[1.0]]), torch.tensor([[0.9]]), gamma=2.0)
    tensor([0.0011])
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from distrib.losses.base import FunctionLoss, as_tensor_pair
from distrib.losses.crossentropy import EPSILON, elementwise_bce
from distrib.losses.reduction import Reduction

__all__ = ["binary_focal_crossentropy", "categorical_focal_crossentropy", "BinaryFocalCrossentropy",
           "CategoricalFocalCrossentropy"]


def _same_shape(who: str, true: torch.Tensor, pred: torch.Tensor) -> None:
    if tuple(true.shape) != tuple(pred.shape):
        raise ValueError(f"{who}: labels of shape {tuple(true.shape)} do not match predictions of shape "
                         f"{tuple(pred.shape)}; give one label per predicted value")


def binary_focal_crossentropy(y_true: Any, y_pred: Any, apply_class_balancing: bool = False, alpha: float = 0.25,
                              gamma: float = 2.0, from_logits: bool = False, label_smoothing: float = 0.0,
                              axis: int = -1) -> torch.Tensor:
    """Binary focal cross-entropy, averaged over ``axis``; with class balancing positives weigh ``alpha``."""
    true, pred = as_tensor_pair(y_true, y_pred)
    _same_shape("binary_focal_crossentropy", true, pred)
    true = true.to(pred.dtype)
    if label_smoothing:
        true = true * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        pred = torch.sigmoid(pred)
    bce = elementwise_bce(true, pred, from_logits=False)
    p_t = true * pred + (1.0 - true) * (1.0 - pred)
    focal = (1.0 - p_t).pow(gamma) * bce
    if apply_class_balancing:
        focal = (true * alpha + (1.0 - true) * (1.0 - alpha)) * focal
    return focal.mean(dim=axis)


def categorical_focal_crossentropy(y_true: Any, y_pred: Any, alpha: float = 0.25, gamma: float = 2.0,
                                   from_logits: bool = False, label_smoothing: float = 0.0,
                                   axis: int = -1) -> torch.Tensor:
    """Categorical focal cross-entropy over ``axis`` (one-hot labels, class scores)."""
    true, pred = as_tensor_pair(y_true, y_pred)
    _same_shape("categorical_focal_crossentropy", true, pred)
    true = true.to(pred.dtype)
    if label_smoothing:
        true = true * (1.0 - label_smoothing) + label_smoothing / pred.shape[-1]
    if from_logits:
        pred = torch.softmax(pred, dim=axis)
    output = (pred / pred.sum(dim=axis, keepdim=True)).clamp(EPSILON, 1.0 - EPSILON)
    focal = alpha * (1.0 - output).pow(gamma) * (-true * output.log())
    return focal.sum(dim=axis)


class BinaryFocalCrossentropy(FunctionLoss):
    """Keras's ``BinaryFocalCrossentropy``.

    Args:
        apply_class_balancing: weigh positives by ``alpha`` and negatives by ``1 - alpha``.
        alpha: the class-balancing weight.
        gamma: the focusing exponent.
        from_logits: whether predictions are logits.
        label_smoothing: labels become ``y * (1 - s) + 0.5 * s``.
        axis: the axis averaged over.
        reduction: a `Reduction`.
        name: the loss's name.
    """

    default_name = "binary_focal_crossentropy"
    fn = staticmethod(binary_focal_crossentropy)

    def __init__(self, apply_class_balancing: bool = False, alpha: float = 0.25, gamma: float = 2.0,
                 from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1,
                 reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name, apply_class_balancing=bool(apply_class_balancing), alpha=float(alpha),
                         gamma=float(gamma), from_logits=bool(from_logits), label_smoothing=float(label_smoothing),
                         axis=int(axis))


class CategoricalFocalCrossentropy(FunctionLoss):
    """Keras's ``CategoricalFocalCrossentropy`` (arguments as `BinaryFocalCrossentropy`, no class balancing)."""

    default_name = "categorical_focal_crossentropy"
    fn = staticmethod(categorical_focal_crossentropy)

    def __init__(self, alpha: float = 0.25, gamma: float = 2.0, from_logits: bool = False,
                 label_smoothing: float = 0.0, axis: int = -1, reduction: Any = Reduction.AUTO,
                 name: Optional[str] = None) -> None:
        super().__init__(reduction, name, alpha=float(alpha), gamma=float(gamma), from_logits=bool(from_logits),
                         label_smoothing=float(label_smoothing), axis=int(axis))
