"""Keras-named metrics whose results are aggregated across all replicas (``distrib.metrics``).

`update_state` is cheap and local (tensor ops, no host sync); `result()`
returns the GLOBAL value and is a collective under multi-replica strategies,
so every worker must call it the same number of times. `local_result()` is
the communication-free per-replica value; `global_results(metrics)`
aggregates several metrics in one collective.

Example (TensorFlow's multi-worker custom-loop tutorial):
    >>> with strategy.scope():
    ...     train_accuracy = distrib.metrics.SparseCategoricalAccuracy(name="train_accuracy")
    >>> train_accuracy.update_state(y, predictions)          # inside strategy.run
    >>> print("accuracy: %f" % train_accuracy.result())       # every worker calls this
    >>> train_accuracy.reset_state()
"""
from distrib.metrics.accuracy import (
    Accuracy,
    BinaryAccuracy,
    CategoricalAccuracy,
    SparseCategoricalAccuracy,
    accuracy,
    binary_accuracy,
    categorical_accuracy,
    sparse_categorical_accuracy,
)
from distrib.metrics.aggregation import global_results
from distrib.metrics.at_constraint import (PrecisionAtRecall, RecallAtPrecision, SensitivityAtSpecificity,
                                           SpecificityAtSensitivity)
from distrib.metrics.auc import AUC
from distrib.metrics.base import Metric
from distrib.metrics.confusion import FalseNegatives, FalsePositives, Precision, Recall, TrueNegatives, TruePositives
from distrib.metrics.f_score import F1Score, FBetaScore
from distrib.metrics.iou import BinaryIoU, IoU, MeanIoU, OneHotIoU, OneHotMeanIoU
from distrib.metrics.probabilistic import (BinaryCrossentropy, CategoricalCrossentropy, CategoricalHinge, Hinge,
                                           KLDivergence, Poisson, SparseCategoricalCrossentropy, SquaredHinge)
from distrib.metrics.r2 import R2Score
from distrib.metrics.reduction import Mean, MeanMetricWrapper, Sum
from distrib.metrics.registry import deserialize, get, resolve_accuracy, serialize
from distrib.metrics.regression import (CosineSimilarity, LogCoshError, MeanAbsoluteError,
                                        MeanAbsolutePercentageError, MeanSquaredError, MeanSquaredLogarithmicError,
                                        RootMeanSquaredError)
from distrib.metrics.torchmetrics_adapter import TorchMetric
from distrib.metrics.top_k import (SparseTopKCategoricalAccuracy, TopKCategoricalAccuracy,
                                   sparse_top_k_categorical_accuracy, top_k_categorical_accuracy)

__all__ = [
    "Metric",
    "Mean",
    "Sum",
    "MeanMetricWrapper",
    "Accuracy",
    "BinaryAccuracy",
    "CategoricalAccuracy",
    "SparseCategoricalAccuracy",
    "MeanSquaredError",
    "MeanAbsoluteError",
    "AUC",
    "Precision",
    "Recall",
    "TopKCategoricalAccuracy",
    "top_k_categorical_accuracy",
    "SparseTopKCategoricalAccuracy",
    "sparse_top_k_categorical_accuracy",
    "RootMeanSquaredError", "MeanAbsolutePercentageError", "MeanSquaredLogarithmicError", "LogCoshError",
    "CosineSimilarity", "R2Score", "BinaryCrossentropy", "CategoricalCrossentropy", "SparseCategoricalCrossentropy",
    "KLDivergence", "Poisson", "Hinge", "SquaredHinge", "CategoricalHinge", "TruePositives", "TrueNegatives",
    "FalsePositives", "FalseNegatives", "PrecisionAtRecall", "RecallAtPrecision", "SensitivityAtSpecificity",
    "SpecificityAtSensitivity", "F1Score", "FBetaScore", "IoU", "MeanIoU", "BinaryIoU", "OneHotIoU",
    "OneHotMeanIoU",
    "TorchMetric",
    "accuracy",
    "binary_accuracy",
    "categorical_accuracy",
    "sparse_categorical_accuracy",
    "global_results",
    "get",
    "resolve_accuracy",
    "serialize",
    "deserialize",
]
