"""Keras's KL divergence, Poisson and hinge losses.

Hinge losses take labels in ``{-1, 1}``; labels in ``{0, 1}`` (all of them)
are mapped to ``{-1, 1}`` first, like Keras.

Example:
    >>> hinge(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.5]]))   # labels become [-1, 1]
    tensor([1.])
    >>> KLDivergence()(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.5]]))
    tensor(0.)
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from distrib.losses.base import FunctionLoss
from distrib.losses.reduction import Reduction
from distrib.losses.regression import EPSILON, aligned, broadcast_error

__all__ = ["kl_divergence", "poisson", "hinge", "squared_hinge", "categorical_hinge", "KLDivergence", "Poisson",
           "Hinge", "SquaredHinge", "CategoricalHinge"]


def _pair(y_true: Any, y_pred: Any) -> tuple:
    true, pred = aligned(y_true, y_pred)
    return true, pred


def kl_divergence(y_true: Any, y_pred: Any) -> torch.Tensor:
    """``sum(y_true * log(y_true / y_pred), axis=-1)``, both clipped to ``[eps, 1]``."""
    true, pred = _pair(y_true, y_pred)

    def fn() -> torch.Tensor:
        t, p = true.clamp(EPSILON, 1.0), pred.clamp(EPSILON, 1.0)
        return (t * torch.log(t / p)).sum(dim=-1)
    return broadcast_error("kl_divergence", true, pred, fn)


def poisson(y_true: Any, y_pred: Any) -> torch.Tensor:
    """``mean(y_pred - y_true * log(y_pred + eps), axis=-1)``."""
    true, pred = _pair(y_true, y_pred)
    return broadcast_error("poisson", true, pred, lambda: (pred - true * torch.log(pred + EPSILON)).mean(dim=-1))


def _signed(labels: torch.Tensor) -> torch.Tensor:
    binary = ((labels == 0) | (labels == 1)).all()
    return torch.where(binary, 2.0 * labels - 1.0, labels)


def hinge(y_true: Any, y_pred: Any) -> torch.Tensor:
    """``mean(max(1 - y_true * y_pred, 0), axis=-1)``."""
    true, pred = _pair(y_true, y_pred)
    return broadcast_error("hinge", true, pred,
                           lambda: (1.0 - _signed(true) * pred).clamp(min=0.0).mean(dim=-1))


def squared_hinge(y_true: Any, y_pred: Any) -> torch.Tensor:
    """``mean(max(1 - y_true * y_pred, 0) ** 2, axis=-1)``."""
    true, pred = _pair(y_true, y_pred)
    return broadcast_error("squared_hinge", true, pred,
                           lambda: (1.0 - _signed(true) * pred).clamp(min=0.0).square().mean(dim=-1))


def categorical_hinge(y_true: Any, y_pred: Any) -> torch.Tensor:
    """``max(max((1 - y_true) * y_pred) - sum(y_true * y_pred) + 1, 0)`` over the last axis."""
    true, pred = _pair(y_true, y_pred)

    def fn() -> torch.Tensor:
        pos = (true * pred).sum(dim=-1)
        neg = ((1.0 - true) * pred).amax(dim=-1)
        return (neg - pos + 1.0).clamp(min=0.0)
    return broadcast_error("categorical_hinge", true, pred, fn)


class KLDivergence(FunctionLoss):
    """Keras's ``KLDivergence`` loss (``"kld"``)."""

    default_name = "kl_divergence"
    fn = staticmethod(kl_divergence)

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name)


class Poisson(FunctionLoss):
    """Keras's ``Poisson`` loss."""

    default_name = "poisson"
    fn = staticmethod(poisson)

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name)


class Hinge(FunctionLoss):
    """Keras's ``Hinge`` loss."""

    default_name = "hinge"
    fn = staticmethod(hinge)

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name)


class SquaredHinge(FunctionLoss):
    """Keras's ``SquaredHinge`` loss."""

    default_name = "squared_hinge"
    fn = staticmethod(squared_hinge)

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name)


class CategoricalHinge(FunctionLoss):
    """Keras's ``CategoricalHinge`` loss."""

    default_name = "categorical_hinge"
    fn = staticmethod(categorical_hinge)

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        super().__init__(reduction, name)
