"""Resolve what users pass in ``metrics=[...]``: Keras names, metric objects, callables.

``"accuracy"`` (or ``"acc"``) is resolved like Keras does, and keeps the name
the user wrote (so logs say ``accuracy``):

1. from the loss, when it is a known one: sparse categorical crossentropy
   (or ``torch.nn.CrossEntropyLoss``) -> `SparseCategoricalAccuracy`,
   categorical crossentropy -> `CategoricalAccuracy`, binary crossentropy
   (or ``BCELoss``/``BCEWithLogitsLoss``) -> `BinaryAccuracy`;
2. else from the shapes, when given (Keras 2/3's rule): predictions with a
   last axis of 1 -> binary; labels of lower rank (or last axis 1 against
   several classes) -> sparse categorical; otherwise categorical;
3. else `Accuracy` (exact match).

Example:
    >>> get("accuracy", loss="sparse_categorical_crossentropy")
    SparseCategoricalAccuracy(name='accuracy')
    >>> get("accuracy", y_true_shape=(32,), y_pred_shape=(32, 10))
    SparseCategoricalAccuracy(name='accuracy')
    >>> get("mse")
    MeanSquaredError(name='mse')

Only the classes listed here can be deserialised (never an arbitrary import).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import torch

from distrib.losses import crossentropy as ce
from distrib.losses import registry as loss_registry
from distrib.losses.base import LossFunctionWrapper, TorchLossWrapper
from distrib.metrics.accuracy import Accuracy, BinaryAccuracy, CategoricalAccuracy, SparseCategoricalAccuracy
from distrib.metrics.auc import AUC
from distrib.metrics.base import Metric
from distrib.metrics.reduction import Mean, MeanMetricWrapper, Sum
from distrib.metrics.at_constraint import (PrecisionAtRecall, RecallAtPrecision, SensitivityAtSpecificity,
                                           SpecificityAtSensitivity)
from distrib.metrics.confusion import FalseNegatives, FalsePositives, Precision, Recall, TrueNegatives, TruePositives
from distrib.metrics.f_score import F1Score, FBetaScore
from distrib.metrics.iou import BinaryIoU, IoU, MeanIoU, OneHotIoU, OneHotMeanIoU
from distrib.metrics import probabilistic as prob
from distrib.metrics.r2 import R2Score
from distrib.metrics.regression import (CosineSimilarity, LogCoshError, MeanAbsoluteError,
                                        MeanAbsolutePercentageError, MeanSquaredError, MeanSquaredLogarithmicError,
                                        RootMeanSquaredError)
from distrib.metrics.top_k import SparseTopKCategoricalAccuracy, TopKCategoricalAccuracy
from distrib.metrics.torchmetrics_adapter import TorchMetric, is_torchmetric
from distrib.utils.registry import ClassRegistry

__all__ = ["get", "serialize", "deserialize", "resolve_accuracy", "CLASSES", "ALIASES"]

CLASSES: Dict[str, type] = {
    cls.__name__: cls
    for cls in (Mean, Sum, Accuracy, BinaryAccuracy, CategoricalAccuracy, SparseCategoricalAccuracy,
                MeanSquaredError, MeanAbsoluteError, AUC, Precision, Recall, TopKCategoricalAccuracy,
                SparseTopKCategoricalAccuracy, RootMeanSquaredError, MeanAbsolutePercentageError,
                MeanSquaredLogarithmicError, LogCoshError, CosineSimilarity, R2Score, TruePositives, TrueNegatives,
                FalsePositives, FalseNegatives, PrecisionAtRecall, RecallAtPrecision, SensitivityAtSpecificity,
                SpecificityAtSensitivity, F1Score, FBetaScore, IoU, MeanIoU, BinaryIoU, OneHotIoU, OneHotMeanIoU,
                prob.BinaryCrossentropy, prob.CategoricalCrossentropy, prob.SparseCategoricalCrossentropy,
                prob.KLDivergence, prob.Poisson, prob.Hinge, prob.SquaredHinge, prob.CategoricalHinge)
}

ALIASES: Dict[str, type] = {
    "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "categorical_accuracy": CategoricalAccuracy,
    "binary_accuracy": BinaryAccuracy,
    "mse": MeanSquaredError,
    "mean_squared_error": MeanSquaredError,
    "mae": MeanAbsoluteError,
    "mean_absolute_error": MeanAbsoluteError,
    "auc": AUC,
    "precision": Precision,
    "recall": Recall,
    "top_k_categorical_accuracy": TopKCategoricalAccuracy,
    "sparse_top_k_categorical_accuracy": SparseTopKCategoricalAccuracy,
    "mean": Mean,
    "sum": Sum,
    "mape": MeanAbsolutePercentageError,
    "mean_absolute_percentage_error": MeanAbsolutePercentageError,
    "msle": MeanSquaredLogarithmicError,
    "mean_squared_logarithmic_error": MeanSquaredLogarithmicError,
    "root_mean_squared_error": RootMeanSquaredError,
    "logcosh": LogCoshError,
    "log_cosh": LogCoshError,
    "cosine_similarity": CosineSimilarity,
    "r2_score": R2Score,
    "kl_divergence": prob.KLDivergence,
    "kld": prob.KLDivergence,
    "poisson": prob.Poisson,
    "hinge": prob.Hinge,
    "squared_hinge": prob.SquaredHinge,
    "categorical_hinge": prob.CategoricalHinge,
    "f1_score": F1Score,
    "fbeta_score": FBetaScore,
}

_CROSSENTROPY_METRICS = {
    "sparse_categorical_crossentropy": prob.SparseCategoricalCrossentropy,
    "categorical_crossentropy": prob.CategoricalCrossentropy,
    "binary_crossentropy": prob.BinaryCrossentropy,
}


def _accuracy_from_loss(loss: Any) -> Optional[type]:
    if loss is None:
        return None
    try:
        obj = loss_registry.get(loss)
    except (ValueError, TypeError):
        return None
    if isinstance(obj, TorchLossWrapper):
        if isinstance(obj.module, torch.nn.CrossEntropyLoss):
            return SparseCategoricalAccuracy
        if isinstance(obj.module, (torch.nn.BCELoss, torch.nn.BCEWithLogitsLoss)):
            return BinaryAccuracy
        return None
    fn = obj.fn if isinstance(obj, LossFunctionWrapper) else None
    if isinstance(obj, ce.SparseCategoricalCrossentropy) or fn in (ce.sparse_categorical_crossentropy,
                                                                   torch.nn.functional.cross_entropy):
        return SparseCategoricalAccuracy
    if isinstance(obj, ce.CategoricalCrossentropy) or fn is ce.categorical_crossentropy:
        return CategoricalAccuracy
    if isinstance(obj, ce.BinaryCrossentropy) or fn in (ce.binary_crossentropy,
                                                        torch.nn.functional.binary_cross_entropy,
                                                        torch.nn.functional.binary_cross_entropy_with_logits):
        return BinaryAccuracy
    return None


def _accuracy_from_shapes(y_true_shape: Sequence[int], y_pred_shape: Sequence[int]) -> type:
    t, p = tuple(y_true_shape), tuple(y_pred_shape)
    if p and p[-1] == 1:
        return BinaryAccuracy
    if len(t) < len(p) or (t and t[-1] == 1 and p and p[-1] > 1):
        return SparseCategoricalAccuracy
    return CategoricalAccuracy


def resolve_accuracy(loss: Any = None, y_true_shape: Optional[Sequence[int]] = None,
                     y_pred_shape: Optional[Sequence[int]] = None) -> type:
    """The accuracy class ``"accuracy"`` means for this loss / these shapes (see module docstring)."""
    cls = _accuracy_from_loss(loss)
    if cls is None and y_true_shape is not None and y_pred_shape is not None:
        cls = _accuracy_from_shapes(y_true_shape, y_pred_shape)
    return cls or Accuracy


def get(identifier: Any, loss: Any = None, y_true_shape: Optional[Sequence[int]] = None,
        y_pred_shape: Optional[Sequence[int]] = None) -> Metric:
    """A metric object for ``identifier``.

    Args:
        identifier: a Keras metric name (``"accuracy"``/``"acc"``,
            ``"sparse_categorical_accuracy"``, ``"categorical_accuracy"``,
            ``"binary_accuracy"``, ``"mse"``, ``"mae"``, ``"auc"``, a
            crossentropy name...) or class name, a `Metric`, a dict from
            `serialize`, a ``torchmetrics.Metric`` (wrapped in `TorchMetric`), or a
            callable ``fn(y_true, y_pred)`` (averaged).
        loss: the compiled loss, used to resolve ``"accuracy"``.
        y_true_shape, y_pred_shape: a batch's shapes, used to resolve
            ``"accuracy"`` when the loss does not decide it.

    Returns:
        A new `Metric` (or ``identifier`` itself if it already is one); its
        name is the string the user passed.
    """
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        if identifier in ("accuracy", "acc"):
            return resolve_accuracy(loss, y_true_shape, y_pred_shape)(name=identifier)
        cls = _CROSSENTROPY_METRICS.get(identifier) or ALIASES.get(identifier) or CLASSES.get(identifier)
        if cls is None:
            known = sorted(set(ALIASES) | {"accuracy", "acc"} | set(_CROSSENTROPY_METRICS))
            raise ValueError(f"unknown metric {identifier!r}; use one of {known}, a distrib.metrics object "
                             "or a callable metric(y_true, y_pred)")
        return cls(name=identifier)
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if is_torchmetric(identifier):
        return TorchMetric(identifier)
    if callable(identifier):
        return MeanMetricWrapper(identifier)
    raise TypeError(f"metric must be a Keras metric name, a distrib.metrics object or a callable, "
                    f"got {type(identifier).__name__}")


_REGISTRY = ClassRegistry("metric", CLASSES)


def serialize(metric: Metric) -> Dict[str, Any]:
    """``{"class_name": ..., "config": {...}}`` for a built-in metric (JSON-serialisable)."""
    return _REGISTRY.serialize(metric)


def deserialize(config: Dict[str, Any]) -> Metric:
    """The metric `serialize` described; only built-in classes are accepted."""
    return _REGISTRY.deserialize(config)
