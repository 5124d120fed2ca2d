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

__all__ = ["top_k_categorical_accuracy", "TopKCategoricalAccuracy"]


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
