"""Cross-entropy losses with Keras semantics: probabilities by default, logits on request.

With ``from_logits=False`` (Keras's default) predictions are probabilities:
categorical ones are renormalised to sum to 1 over the last axis and every
probability is clipped to ``[1e-7, 1 - 1e-7]`` before the log, exactly as
Keras does, so a softmax/sigmoid output layer gives Keras's numbers. With
``from_logits=True`` the softmax/sigmoid is fused into a numerically stable
log-softmax / ``binary_cross_entropy_with_logits``.

Example:
    >>> loss = SparseCategoricalCrossentropy(from_logits=True, reduction=Reduction.NONE)
    >>> loss(torch.tensor([0, 1]), torch.tensor([[2.0, 0.0], [0.0, 0.0]]))
    tensor([0.1269, 0.6931])
    >>> loss(torch.tensor([12]), torch.zeros(1, 10))
    Traceback (most recent call last):
    ValueError: sparse_categorical_crossentropy: labels contain 12 but the model outputs 10 classes ...

Out-of-range labels are caught for free on CPU (the gather fails and the
error is translated). On an accelerator an out-of-range index would be a
device-side assert, so each loss object checks the labels of its *first* call
there (one host synchronisation, once).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch
import torch.nn.functional as F

from distrib.losses.base import Loss, as_tensor_pair
from distrib.losses.reduction import Reduction, match_ranks

__all__ = [
    "EPSILON",
    "sparse_categorical_crossentropy",
    "categorical_crossentropy",
    "binary_crossentropy",
    "elementwise_bce",
    "check_labels",
    "SparseCategoricalCrossentropy",
    "CategoricalCrossentropy",
    "BinaryCrossentropy",
]

#: Keras's ``backend.epsilon()``: probabilities are clipped to [EPSILON, 1 - EPSILON].
EPSILON = 1e-7


def _shape(t: torch.Tensor) -> tuple:
    return tuple(t.shape)


def check_labels(labels: torch.Tensor, num_classes: int, who: str = "sparse_categorical_crossentropy") -> None:
    """Raise a one-line error if any class label is outside ``0..num_classes-1`` (host sync)."""
    if labels.numel() == 0:
        return
    lo, hi = int(labels.min()), int(labels.max())
    bad = hi if hi >= num_classes else (lo if lo < 0 else None)
    if bad is not None:
        raise ValueError(
            f"{who}: labels contain {bad} but the model outputs {num_classes} classes "
            f"(valid labels are 0..{num_classes - 1}); fix the labels or the size of the output layer")


def _sparse_labels(y_true: torch.Tensor, y_pred: torch.Tensor, who: str) -> torch.Tensor:
    if y_pred.dim() < 1:
        raise ValueError(f"{who}: predictions must have a class axis, got a scalar")
    labels = y_true
    if labels.dim() == y_pred.dim() and labels.dim() > 0 and labels.shape[-1] == 1:
        labels = labels.squeeze(-1)
    if labels.shape != y_pred.shape[:-1]:
        raise ValueError(
            f"{who}: labels of shape {_shape(y_true)} do not fit predictions of shape {_shape(y_pred)}; "
            f"integer labels need shape {_shape(y_pred)[:-1]} (for one-hot labels use categorical_crossentropy)")
    if labels.is_floating_point() or labels.dtype != torch.long:
        labels = labels.long()
    return labels


def _log_probs(y_pred: torch.Tensor, from_logits: bool, axis: int = -1) -> torch.Tensor:
    if from_logits:
        return F.log_softmax(y_pred, dim=axis)
    probs = y_pred / y_pred.sum(dim=axis, keepdim=True)
    return probs.clamp(EPSILON, 1.0 - EPSILON).log()


def sparse_categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                                    ignore_class: Optional[int] = None) -> torch.Tensor:
    """Cross-entropy between integer labels ``[...]`` and class scores ``[..., C]``; shape ``[...]``.

    Labels equal to ``ignore_class`` give a loss of 0 (`SparseCategoricalCrossentropy`
    also leaves them out of the mean, like Keras's mask).
    """
    return _sparse_with_mask(y_true, y_pred, from_logits, ignore_class)[0]


def _sparse_with_mask(y_true: Any, y_pred: Any, from_logits: bool, ignore_class: Optional[int]) -> tuple:
    who = "sparse_categorical_crossentropy"
    true, pred = as_tensor_pair(y_true, y_pred)
    labels = _sparse_labels(true, pred, who)
    valid: Optional[torch.Tensor] = None
    if ignore_class is not None:
        valid = labels != int(ignore_class)
        labels = torch.where(valid, labels, torch.zeros_like(labels))
        pred = torch.where(valid.unsqueeze(-1), pred, torch.zeros_like(pred))
    losses = _gather_nll(labels, pred, from_logits, who)
    if valid is not None:
        losses = torch.where(valid, losses, torch.zeros_like(losses))
    return losses, valid


#: No label is this (nll_loss ignores -100 by default; a label of -100 must fail as the gather does).
_NO_CLASS = -(1 << 63)


#: Whether this torch's CPU ``nll_loss`` kernel takes a dtype (torch 2.3 has none for float16), probed once.
_CPU_NLL_KERNEL: dict[torch.dtype, bool] = {}


def _has_nll_kernel(log_probs: torch.Tensor) -> bool:
    """Whether ``F.nll_loss`` runs on ``log_probs``' device and dtype (only CPU kernels are probed)."""
    if log_probs.device.type != "cpu":
        return True
    dtype = log_probs.dtype
    if dtype not in _CPU_NLL_KERNEL:
        try:
            F.nll_loss(torch.zeros(1, 1, dtype=dtype), torch.zeros(1, dtype=torch.long), reduction="none")
            _CPU_NLL_KERNEL[dtype] = True
        except RuntimeError:  # '"nll_loss_out_frame" not implemented for 'Half'' at torch 2.3
            _CPU_NLL_KERNEL[dtype] = False
    return _CPU_NLL_KERNEL[dtype]


def _gather_nll(labels: torch.Tensor, pred: torch.Tensor, from_logits: bool, who: str) -> torch.Tensor:
    """``-log p[label]`` per row: ``nll_loss``'s one kernel where this torch has it, else the gather
    (the same values in the same dtype; see docs/compatibility.md)."""
    log_probs = _log_probs(pred, from_logits)
    try:
        if log_probs.dim() == 2 and _has_nll_kernel(log_probs):  # the gather's values, one kernel
            return F.nll_loss(log_probs, labels, reduction="none", ignore_index=_NO_CLASS)
        return -log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    except (RuntimeError, IndexError):
        try:
            check_labels(labels, pred.shape[-1], who)
        except ValueError as err:
            raise err from None
        raise


def categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                             label_smoothing: float = 0.0, axis: int = -1) -> torch.Tensor:
    """Cross-entropy between one-hot (or soft) labels and class scores, both ``[..., C]``; shape ``[...]``."""
    true, pred = as_tensor_pair(y_true, y_pred)
    if _shape(true) != _shape(pred):
        raise ValueError(
            f"categorical_crossentropy: labels of shape {_shape(true)} do not match predictions of shape "
            f"{_shape(pred)}; one-hot labels need the predictions' shape "
            "(for integer class labels use sparse_categorical_crossentropy)")
    true = true.to(pred.dtype)
    if label_smoothing:
        true = true * (1.0 - label_smoothing) + label_smoothing / pred.shape[-1]
    return -(true * _log_probs(pred, from_logits, axis)).sum(dim=axis)


def binary_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                        label_smoothing: float = 0.0, axis: int = -1) -> torch.Tensor:
    """Binary cross-entropy, averaged over ``axis`` like Keras (one value for rank-1 inputs)."""
    true, pred = as_tensor_pair(y_true, y_pred)
    true, pred = match_ranks(true, pred)
    if _shape(true) != _shape(pred):
        raise ValueError(
            f"binary_crossentropy: labels of shape {_shape(true)} do not match predictions of shape "
            f"{_shape(pred)}; give one 0/1 label per predicted value")
    true = true.to(pred.dtype)
    if label_smoothing:
        true = true * (1.0 - label_smoothing) + 0.5 * label_smoothing
    losses = elementwise_bce(true, pred, from_logits)
    if not -losses.dim() <= axis < max(losses.dim(), 1):
        raise ValueError(f"binary_crossentropy: axis={axis} is outside predictions of shape {_shape(pred)}")
    return losses.mean(dim=axis)


def elementwise_bce(true: torch.Tensor, pred: torch.Tensor, from_logits: bool) -> torch.Tensor:
    """Unreduced binary cross-entropy of same-shaped float tensors (probabilities clipped to ``[eps, 1-eps]``)."""
    if from_logits:
        return F.binary_cross_entropy_with_logits(pred, true, reduction="none")
    p = pred.clamp(EPSILON, 1.0 - EPSILON)
    return -(true * p.log() + (1.0 - true) * torch.log1p(-p))


class SparseCategoricalCrossentropy(Loss):
    """Keras's ``SparseCategoricalCrossentropy``: integer labels, class scores.

    Args:
        from_logits: whether predictions are logits (True) or probabilities (False, Keras's default).
        ignore_class: a label value whose elements do not count: their loss
            is 0 and the mean reductions divide by the number of the others.
        reduction: a `Reduction`; ``Reduction.NONE`` returns per-example losses.
        name: the loss's name.
    """

    default_name = "sparse_categorical_crossentropy"

    def __init__(self, from_logits: bool = False, ignore_class: Optional[int] = None,
                 reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        if isinstance(ignore_class, (str, Reduction)):  # the old positional order (from_logits, reduction)
            ignore_class, reduction = None, ignore_class
        super().__init__(reduction, name)
        self.from_logits = bool(from_logits)
        self.ignore_class = None if ignore_class is None else int(ignore_class)
        self._labels_checked = False

    def call(self, y_true: Any, y_pred: Any) -> torch.Tensor:
        return self.call_with_mask(y_true, y_pred)[0]

    def call_with_mask(self, y_true: Any, y_pred: Any) -> tuple:
        if not self._labels_checked:
            true, pred = as_tensor_pair(y_true, y_pred)
            if pred.device.type != "cpu":
                labels = _sparse_labels(true, pred, self.name)
                if self.ignore_class is not None:
                    labels = labels[labels != self.ignore_class]
                check_labels(labels, pred.shape[-1], self.name)
            self._labels_checked = True
        return _sparse_with_mask(y_true, y_pred, self.from_logits, self.ignore_class)

    def get_config(self) -> Dict[str, Any]:
        return {"from_logits": self.from_logits, "ignore_class": self.ignore_class, **super().get_config()}


class _SmoothedCrossentropy(Loss):
    """What the categorical and binary crossentropy losses share: their arguments and config."""

    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1,
                 reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        if isinstance(axis, (str, Reduction)) or axis is None:  # the old positional order (..., reduction)
            axis, reduction = -1, axis
        super().__init__(reduction, name)
        self.from_logits = bool(from_logits)
        self.label_smoothing = float(label_smoothing)
        self.axis = int(axis)

    def get_config(self) -> Dict[str, Any]:
        return {"from_logits": self.from_logits, "label_smoothing": self.label_smoothing, "axis": self.axis,
                **super().get_config()}


class CategoricalCrossentropy(_SmoothedCrossentropy):
    """Keras's ``CategoricalCrossentropy``: one-hot labels, class scores.

    Args:
        from_logits: whether predictions are logits.
        label_smoothing: in ``[0, 1]``; labels become ``y * (1 - s) + s / num_classes``.
        reduction: a `Reduction`.
        name: the loss's name.
    """

    default_name = "categorical_crossentropy"

    def call(self, y_true: Any, y_pred: Any) -> torch.Tensor:
        return categorical_crossentropy(y_true, y_pred, self.from_logits, self.label_smoothing, self.axis)


class BinaryCrossentropy(_SmoothedCrossentropy):
    """Keras's ``BinaryCrossentropy``: 0/1 labels, one probability (or logit) per label.

    Args:
        from_logits: whether predictions are logits.
        label_smoothing: in ``[0, 1]``; labels become ``y * (1 - s) + 0.5 * s``.
        reduction: a `Reduction`.
        name: the loss's name.
    """

    default_name = "binary_crossentropy"

    def call(self, y_true: Any, y_pred: Any) -> torch.Tensor:
        return binary_crossentropy(y_true, y_pred, self.from_logits, self.label_smoothing, self.axis)
