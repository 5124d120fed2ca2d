"""`TopKCategoricalAccuracy`: how often the one-hot label is among the ``k`` highest predictions.

Keras's rule (``in_top_k``): the label's class is in the top ``k`` when fewer
than ``k`` classes have a strictly higher prediction, so ties at the
boundary count as hits.

Example:
    >>> m = TopKCategoricalAccuracy(k=1)
    >>> m.update_state([[0, 0, 1], [0, 1, 0]], [[0.1, 0.2, 0.7], [0.5, 0.4, 0.1]])
    >>> m.local_result()
    tensor(0.5000)
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from distrib.losses.base import as_tensor_pair
from distrib.metrics.reduction import MeanMetricWrapper

__all__ = ["top_k_categorical_accuracy", "TopKCategoricalAccuracy", "sparse_top_k_categorical_accuracy",
           "SparseTopKCategoricalAccuracy"]


def top_k_categorical_accuracy(y_true: Any, y_pred: Any, k: int = 5) -> torch.Tensor:
    """1.0 where ``argmax(y_true)`` is among the ``k`` largest of ``y_pred``; shape ``y_pred.shape[:-1]``."""
    true, pred = as_tensor_pair(y_true, y_pred)
    if tuple(true.shape) != tuple(pred.shape) or pred.dim() == 0:
        raise ValueError(f"top_k_categorical_accuracy: one-hot labels of shape {tuple(true.shape)} must have "
                         f"the predictions' shape {tuple(pred.shape)}")
    label = true.argmax(dim=-1, keepdim=True)
    target = pred.gather(-1, label)
    higher = (pred > target).sum(dim=-1)
    return (higher < int(k)).to(torch.float32)


class TopKCategoricalAccuracy(MeanMetricWrapper):
    """Keras's ``TopKCategoricalAccuracy`` (default ``k=5``)."""

    direction = "up"

    def __init__(self, k: int = 5, name: str = "top_k_categorical_accuracy",
                 dtype: Optional[torch.dtype] = None) -> None:
        if int(k) < 1:
            raise ValueError(f"TopKCategoricalAccuracy: k must be >= 1, got {k}")
        super().__init__(top_k_categorical_accuracy, name, dtype, k=int(k))


def sparse_top_k_categorical_accuracy(y_true: Any, y_pred: Any, k: int = 5) -> torch.Tensor:
    """1.0 where the integer label is among the ``k`` largest of ``y_pred``; shaped like the labels.

    Labels ``[B]`` or ``[B, 1]`` go with predictions ``[B, C]``; labels
    ``[B, T]`` with predictions ``[B, T, C]``.
    """
    true, pred = as_tensor_pair(y_true, y_pred)
    if pred.dim() == 0:
        raise ValueError("sparse_top_k_categorical_accuracy: predictions need a class axis, got a scalar")
    labels = true.reshape(-1).long()
    flat = pred.reshape(-1, pred.shape[-1])
    if labels.shape[0] != flat.shape[0]:
        raise ValueError(f"sparse_top_k_categorical_accuracy: labels of shape {tuple(true.shape)} do not fit "
                         f"predictions of shape {tuple(pred.shape)}; give one class label per prediction row")
    inside = (labels >= 0) & (labels < flat.shape[-1])
    target = flat.gather(-1, labels.clamp(0, flat.shape[-1] - 1).unsqueeze(-1))
    hits = ((flat > target).sum(dim=-1) < int(k)) & inside
    shape = true.shape if true.dim() > 1 else (flat.shape[0],)
    return hits.to(torch.float32).reshape(shape)


class SparseTopKCategoricalAccuracy(MeanMetricWrapper):
    """Keras's ``SparseTopKCategoricalAccuracy`` (default ``k=5``): integer labels."""

    direction = "up"

    def __init__(self, k: int = 5, name: str = "sparse_top_k_categorical_accuracy",
                 dtype: Optional[torch.dtype] = None) -> None:
        if int(k) < 1:
            raise ValueError(f"SparseTopKCategoricalAccuracy: k must be >= 1, got {k}")
        super().__init__(sparse_top_k_categorical_accuracy, name, dtype, k=int(k))
