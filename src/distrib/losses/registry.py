"""Resolve what users pass as ``loss=``: Keras names, loss objects, torch loss modules, callables.

Example:
    >>> get("sparse_categorical_crossentropy")
    SparseCategoricalCrossentropy(from_logits=False, reduction='auto', name='sparse_categorical_crossentropy')
    >>> get("mse").name
    'mean_squared_error'
    >>> get(torch.nn.CrossEntropyLoss()).per_example(torch.tensor([0]), torch.zeros(1, 2))
    tensor([0.6931])

`serialize`/`deserialize` turn built-in loss objects into JSON and back; only
the classes listed here can be deserialised, never an arbitrary import.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from distrib.losses.base import Loss, LossFunctionWrapper, TorchLossWrapper
from distrib.losses.crossentropy import BinaryCrossentropy, CategoricalCrossentropy, SparseCategoricalCrossentropy
from distrib.losses.focal import BinaryFocalCrossentropy, CategoricalFocalCrossentropy
from distrib.losses.overlap import Dice, Tversky
from distrib.losses.probabilistic import CategoricalHinge, Hinge, KLDivergence, Poisson, SquaredHinge
from distrib.losses.regression import (CosineSimilarity, Huber, LogCosh, MeanAbsoluteError,
                                       MeanAbsolutePercentageError, MeanSquaredError, MeanSquaredLogarithmicError)
from distrib.utils.registry import ClassRegistry

__all__ = ["get", "serialize", "deserialize", "CLASSES", "ALIASES"]

CLASSES: Dict[str, type] = {
    cls.__name__: cls
    for cls in (SparseCategoricalCrossentropy, CategoricalCrossentropy, BinaryCrossentropy,
                BinaryFocalCrossentropy, CategoricalFocalCrossentropy, MeanSquaredError, MeanAbsoluteError,
                MeanAbsolutePercentageError, MeanSquaredLogarithmicError, Huber, LogCosh, CosineSimilarity,
                KLDivergence, Poisson, Hinge, SquaredHinge, CategoricalHinge, Dice, Tversky)
}

#: Keras's string names for the built-in losses (its function names and short aliases).
ALIASES: Dict[str, type] = {
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "binary_crossentropy": BinaryCrossentropy,
    "bce": BinaryCrossentropy,
    "BCE": BinaryCrossentropy,
    "binary_focal_crossentropy": BinaryFocalCrossentropy,
    "categorical_focal_crossentropy": CategoricalFocalCrossentropy,
    "mean_squared_error": MeanSquaredError,
    "mse": MeanSquaredError,
    "MSE": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError,
    "mae": MeanAbsoluteError,
    "MAE": MeanAbsoluteError,
    "mean_absolute_percentage_error": MeanAbsolutePercentageError,
    "mape": MeanAbsolutePercentageError,
    "MAPE": MeanAbsolutePercentageError,
    "mean_squared_logarithmic_error": MeanSquaredLogarithmicError,
    "msle": MeanSquaredLogarithmicError,
    "MSLE": MeanSquaredLogarithmicError,
    "huber": Huber,
    "log_cosh": LogCosh,
    "cosine_similarity": CosineSimilarity,
    "kl_divergence": KLDivergence,
    "kld": KLDivergence,
    "KLD": KLDivergence,
    "poisson": Poisson,
    "hinge": Hinge,
    "squared_hinge": SquaredHinge,
    "categorical_hinge": CategoricalHinge,
    "dice": Dice,
    "tversky": Tversky,
}


def get(identifier: Any) -> Optional[Loss]:
    """A loss object for ``identifier``.

    Args:
        identifier: a Keras loss name (any key of `ALIASES`:
            ``"sparse_categorical_crossentropy"``, ``"mse"``, ``"huber"``,
            ``"kld"``, ...) or class name (``"Huber"``), a `Loss`, a ``torch.nn`` loss module, a dict from
            `serialize`, any callable ``fn(y_true, y_pred)``, or None.

    Returns:
        A `Loss` (None for None).
    """
    if identifier is None or isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str):
        cls = ALIASES.get(identifier) or CLASSES.get(identifier)
        if cls is None:
            raise ValueError(
                f"unknown loss {identifier!r}; use one of {sorted(ALIASES)}, a distrib.losses object "
                "or a callable loss(y_true, y_pred)")
        return cls()
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, torch.nn.modules.loss._Loss):
        return TorchLossWrapper(identifier)
    if callable(identifier):
        return LossFunctionWrapper(identifier)
    raise TypeError(
        f"loss must be a Keras loss name, a distrib.losses object or a callable, got {type(identifier).__name__}")


_REGISTRY = ClassRegistry("loss", CLASSES)


def serialize(loss: Loss) -> Dict[str, Any]:
    """``{"class_name": ..., "config": {...}}`` for a built-in loss (JSON-serialisable)."""
    return _REGISTRY.serialize(loss)


def deserialize(config: Dict[str, Any]) -> Loss:
    """The loss `serialize` described; only built-in classes are accepted."""
    return _REGISTRY.deserialize(config)
