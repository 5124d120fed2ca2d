"""Keras-named metrics whose results are aggregated across all replicas (``distrib.metrics``).

`update_state` is cheap and local (tensor ops, no host sync); `result()`
returns the GLOBAL value and is a collective under multi-replica strategies,
so every worker must call it the same number of times. `local_result()` is
the communication-free per-replica value; `global_results(metrics)`
aggregates several metrics in one collective.

Example (the seeds' custom loop):
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
from distrib.metrics.auc import AUC
from distrib.metrics.base import Metric
from distrib.metrics.confusion import Precision, Recall
from distrib.metrics.reduction import Mean, MeanMetricWrapper, Sum
from distrib.metrics.registry import deserialize, get, resolve_accuracy, serialize
from distrib.metrics.regression import MeanAbsoluteError, MeanSquaredError
from distrib.metrics.top_k import TopKCategoricalAccuracy, top_k_categorical_accuracy

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
