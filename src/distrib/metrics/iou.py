"""Keras's intersection-over-union metrics: IoU, MeanIoU, BinaryIoU, OneHotIoU, OneHotMeanIoU.

The state is a ``num_classes x num_classes`` confusion matrix (rows: true
class, columns: predicted class) of weighted counts, summed across replicas.
A class's IoU is ``tp / (tp + fp + fn)``; the result is the mean over the
target classes that occur (true or predicted). As in Keras, whose IoU
metrics count in integers by default, sample weights are truncated to
integers unless a floating ``dtype`` is given; labels and predictions
outside ``0..num_classes-1`` (and ``ignore_class``) are left out.

Example:
    >>> m = MeanIoU(num_classes=2)
    >>> m.update_state([0, 0, 1, 1], [0, 1, 0, 1])
    >>> m.local_result()                    # class 0: 1 / 3, class 1: 1 / 3
    tensor(0.3333)
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import torch

from distrib.metrics.base import Metric

__all__ = ["IoU", "MeanIoU", "BinaryIoU", "OneHotIoU", "OneHotMeanIoU"]


class IoU(Metric):
    """Keras's ``IoU`` over ``target_class_ids``.

    Args:
        num_classes: the number of classes.
        target_class_ids: the classes averaged over.
        name: the metric's name.
        dtype: a floating dtype keeps fractional sample weights (Keras's default counts in integers).
        ignore_class: a label value left out.
        sparse_y_true: labels are class ids (else one-hot / scores, arg-maxed over ``axis``).
        sparse_y_pred: predictions are class ids (else scores, arg-maxed over ``axis``).
        axis: the class axis for arg-max.
    """

    direction = "up"

    def __init__(self, num_classes: int, target_class_ids: Sequence[int], name: Optional[str] = None,
                 dtype: Optional[torch.dtype] = None, ignore_class: Optional[int] = None, sparse_y_true: bool = True,
                 sparse_y_pred: bool = True, axis: int = -1) -> None:
        super().__init__(name, dtype)
        self._integer_weights = dtype is None or not dtype.is_floating_point
        self.num_classes = int(num_classes)
        self.target_class_ids = [int(c) for c in target_class_ids]
        if not self.target_class_ids or max(self.target_class_ids) >= self.num_classes:
            raise ValueError(f"{type(self).__name__}: target_class_ids {self.target_class_ids} must be in "
                             f"[0, {self.num_classes})")
        self.ignore_class = ignore_class
        self.sparse_y_true, self.sparse_y_pred, self.axis = bool(sparse_y_true), bool(sparse_y_pred), int(axis)
        self.add_state("total_cm", (self.num_classes, self.num_classes))

    def _classes(self, y_true: Any, y_pred: Any) -> tuple:
        true, pred = torch.as_tensor(y_true), torch.as_tensor(y_pred)
        if not self.sparse_y_true:
            true = true.argmax(dim=self.axis)
        if not self.sparse_y_pred:
            pred = pred.argmax(dim=self.axis)
        return true.reshape(-1).to(torch.int64), pred.reshape(-1).to(torch.int64)

    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Optional[Any] = None) -> None:
        true, pred = self._classes(y_true, y_pred)
        if true.shape != pred.shape:
            raise ValueError(f"{type(self).__name__}: {true.numel()} labels but {pred.numel()} predictions")
        if sample_weight is None:
            weight = torch.ones(true.shape, dtype=torch.float64, device=true.device)
        else:
            weight = torch.as_tensor(sample_weight, device=true.device).to(torch.float64).reshape(-1)
            if self._integer_weights:
                weight = weight.trunc()
            weight = weight.broadcast_to(true.shape)
        n = self.num_classes
        valid = (true >= 0) & (true < n) & (pred >= 0) & (pred < n)
        if self.ignore_class is not None:
            valid &= true != int(self.ignore_class)
        index = torch.where(valid, true * n + pred, torch.zeros_like(true))
        counts = torch.bincount(index, weights=torch.where(valid, weight, 0.0), minlength=n * n)
        self._align_device(counts)
        self.total_cm.add_(counts.reshape(n, n))

    def result_from_states(self, states: Dict[str, torch.Tensor]) -> torch.Tensor:
        cm = states["total_cm"]
        tp = cm.diagonal()
        denominator = cm.sum(0) + cm.sum(1) - tp
        ids = torch.tensor(self.target_class_ids, device=cm.device)
        tp, denominator = tp[ids], denominator[ids]
        valid = denominator > 1e-9
        iou = torch.where(valid, tp / (denominator + 1e-7), torch.zeros_like(tp))
        return iou.sum() / (valid.sum() + 1e-7)

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), "num_classes": self.num_classes, "target_class_ids": self.target_class_ids,
                "ignore_class": self.ignore_class, "sparse_y_true": self.sparse_y_true,
                "sparse_y_pred": self.sparse_y_pred, "axis": self.axis}


class MeanIoU(IoU):
    """Keras's ``MeanIoU``: `IoU` over every class."""

    def __init__(self, num_classes: int, name: Optional[str] = None, dtype: Optional[torch.dtype] = None,
                 ignore_class: Optional[int] = None, sparse_y_true: bool = True, sparse_y_pred: bool = True,
                 axis: int = -1) -> None:
        super().__init__(num_classes, list(range(int(num_classes))), name, dtype, ignore_class, sparse_y_true,
                         sparse_y_pred, axis)

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.pop("target_class_ids")
        return config


class BinaryIoU(IoU):
    """Keras's ``BinaryIoU``: predictions ``>= threshold`` are class 1."""

    def __init__(self, target_class_ids: Sequence[int] = (0, 1), threshold: float = 0.5, name: Optional[str] = None,
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(2, target_class_ids, name, dtype)
        self.threshold = float(threshold)

    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Optional[Any] = None) -> None:
        super().update_state(y_true, (torch.as_tensor(y_pred) >= self.threshold).to(torch.int64), sample_weight)

    def get_config(self) -> Dict[str, Any]:
        return {"name": self.name, "dtype": str(self.dtype).replace("torch.", ""),
                "target_class_ids": self.target_class_ids, "threshold": self.threshold}


class OneHotIoU(IoU):
    """Keras's ``OneHotIoU``: one-hot labels and class scores (both arg-maxed)."""

    def __init__(self, num_classes: int, target_class_ids: Sequence[int], name: Optional[str] = None,
                 dtype: Optional[torch.dtype] = None, ignore_class: Optional[int] = None,
                 sparse_y_pred: bool = False, axis: int = -1) -> None:
        super().__init__(num_classes, target_class_ids, name, dtype, ignore_class, False, sparse_y_pred, axis)

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.pop("sparse_y_true")
        return config


class OneHotMeanIoU(MeanIoU):
    """Keras's ``OneHotMeanIoU``: `MeanIoU` of one-hot labels and class scores."""

    def __init__(self, num_classes: int, name: Optional[str] = None, dtype: Optional[torch.dtype] = None,
                 ignore_class: Optional[int] = None, sparse_y_pred: bool = False, axis: int = -1) -> None:
        super().__init__(num_classes, name, dtype, ignore_class, False, sparse_y_pred, axis)

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.pop("sparse_y_true")
        return config
