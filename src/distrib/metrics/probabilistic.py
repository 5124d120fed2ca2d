"""Keras's probabilistic and hinge metrics: running means of the matching loss functions.

Example:
    >>> m = BinaryCrossentropy()
    >>> m.update_state([[0.0, 1.0]], [[0.5, 0.5]])
    >>> m.local_result()
    tensor(0.6931)
"""
from __future__ import annotations

from typing import Optional

import torch

from distrib.losses import crossentropy as ce
from distrib.losses import probabilistic as prob
from distrib.metrics.reduction import MeanMetricWrapper

__all__ = ["BinaryCrossentropy", "CategoricalCrossentropy", "SparseCategoricalCrossentropy", "KLDivergence",
           "Poisson", "Hinge", "SquaredHinge", "CategoricalHinge"]


class _LossMean(MeanMetricWrapper):
    direction = "down"


class BinaryCrossentropy(_LossMean):
    """Keras's ``BinaryCrossentropy`` metric."""

    def __init__(self, name: str = "binary_crossentropy", dtype: Optional[torch.dtype] = None,
                 from_logits: bool = False, label_smoothing: float = 0.0) -> None:
        super().__init__(ce.binary_crossentropy, name, dtype, from_logits=bool(from_logits),
                         label_smoothing=float(label_smoothing))


class CategoricalCrossentropy(_LossMean):
    """Keras's ``CategoricalCrossentropy`` metric."""

    def __init__(self, name: str = "categorical_crossentropy", dtype: Optional[torch.dtype] = None,
                 from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1) -> None:
        super().__init__(ce.categorical_crossentropy, name, dtype, from_logits=bool(from_logits),
                         label_smoothing=float(label_smoothing), axis=int(axis))


class SparseCategoricalCrossentropy(_LossMean):
    """Keras's ``SparseCategoricalCrossentropy`` metric."""

    def __init__(self, name: str = "sparse_categorical_crossentropy", dtype: Optional[torch.dtype] = None,
                 from_logits: bool = False) -> None:
        super().__init__(ce.sparse_categorical_crossentropy, name, dtype, from_logits=bool(from_logits))


class KLDivergence(_LossMean):
    """Keras's ``KLDivergence`` metric."""

    def __init__(self, name: str = "kl_divergence", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(prob.kl_divergence, name, dtype)


class Poisson(_LossMean):
    """Keras's ``Poisson`` metric."""

    def __init__(self, name: str = "poisson", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(prob.poisson, name, dtype)


class Hinge(_LossMean):
    """Keras's ``Hinge`` metric."""

    def __init__(self, name: str = "hinge", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(prob.hinge, name, dtype)


class SquaredHinge(_LossMean):
    """Keras's ``SquaredHinge`` metric."""

    def __init__(self, name: str = "squared_hinge", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(prob.squared_hinge, name, dtype)


class CategoricalHinge(_LossMean):
    """Keras's ``CategoricalHinge`` metric."""

    def __init__(self, name: str = "categorical_hinge", dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(prob.categorical_hinge, name, dtype)
