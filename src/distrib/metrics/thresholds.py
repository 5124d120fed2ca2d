"""Confusion counts at many sorted thresholds with one ``bucketize`` and ``bincount`` (no host sync).

A prediction is positive at threshold ``t`` when it is strictly greater than
``t`` (Keras's rule); labels are positive when non-zero. Counts are weighted
and kept per label column when ``multi_label`` (shape ``[T, L]``), else pooled
(shape ``[T]``).

Example:
    >>> counts = threshold_counts([0, 1, 1], [0.2, 0.6, 0.9], torch.tensor([0.0, 0.5, 1.0]), None, "m")
    >>> counts["tp"], counts["fp"]
    (tensor([2., 2., 0.], dtype=torch.float64), tensor([1., 0., 0.], dtype=torch.float64))
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from distrib.losses.base import as_tensor_pair
from distrib.losses.reduction import match_ranks

__all__ = ["threshold_counts", "divide_no_nan", "aligned_inputs"]


def divide_no_nan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a / b``, 0 where ``b`` is 0."""
    return torch.where(b != 0, a / torch.where(b != 0, b, torch.ones_like(b)), torch.zeros_like(a))


def _weights(sample_weight: Any, pred: torch.Tensor, who: str) -> torch.Tensor:
    if sample_weight is None:
        return torch.ones_like(pred)
    w = torch.as_tensor(sample_weight, device=pred.device).to(torch.float64)
    w, _ = match_ranks(w, pred)
    while w.dim() < pred.dim():  # one weight per example: the same for all its labels
        w = w.unsqueeze(-1)
    try:
        return w.broadcast_to(pred.shape)
    except RuntimeError:
        raise ValueError(f"{who}: sample_weight of shape {tuple(w.shape)} does not broadcast to the "
                         f"predictions' shape {tuple(pred.shape)}") from None


def aligned_inputs(y_true: Any, y_pred: Any, sample_weight: Optional[Any], who: str) -> tuple:
    """Labels, float64 predictions of the same shape, and float64 weights broadcast to them (ones if None)."""
    true, pred = as_tensor_pair(y_true, y_pred)
    true, pred = match_ranks(true, pred)
    if tuple(true.shape) != tuple(pred.shape):
        raise ValueError(f"{who}: labels of shape {tuple(true.shape)} do not match predictions of shape "
                         f"{tuple(pred.shape)}; give one 0/1 label per predicted value")
    pred = pred.to(torch.float64)
    return true, pred, _weights(sample_weight, pred, who)


def threshold_counts(y_true: Any, y_pred: Any, thresholds: torch.Tensor, sample_weight: Optional[Any], who: str,
                     class_id: Optional[int] = None, multi_label: bool = False) -> Dict[str, torch.Tensor]:
    """Weighted ``tp``, ``fp``, ``tn``, ``fn`` (float64) at each of the sorted ``thresholds``."""
    true, pred, weight = aligned_inputs(y_true, y_pred, sample_weight, who)
    if class_id is not None:
        if pred.dim() == 0 or not 0 <= int(class_id) < pred.shape[-1]:
            raise ValueError(f"{who}: class_id={class_id} is outside the classes of predictions shaped "
                             f"{tuple(pred.shape)}")
        pred, true, weight = pred[..., int(class_id)], true[..., int(class_id)], weight[..., int(class_id)]
    if multi_label:
        if pred.dim() != 2:
            raise ValueError(f"{who}: multi_label needs predictions of shape (batch, labels), got {tuple(pred.shape)}")
        labels = pred.shape[1]
    else:
        labels = 1
    pred, positive, weight = pred.reshape(-1, labels), true.reshape(-1, labels) != 0, weight.reshape(-1, labels)
    if thresholds.device != pred.device or thresholds.dtype != torch.float64:
        thresholds = thresholds.to(device=pred.device, dtype=torch.float64)
    n = thresholds.numel()
    bucket = torch.bucketize(pred.contiguous(), thresholds, right=False)  # thresholds strictly below
    index = (bucket * labels + torch.arange(labels, device=pred.device)).reshape(-1)
    size = (n + 1) * labels
    pos_hist = torch.bincount(index, weights=(weight * positive).reshape(-1), minlength=size).reshape(n + 1, labels)
    neg_hist = torch.bincount(index, weights=(weight * ~positive).reshape(-1), minlength=size).reshape(n + 1, labels)
    pos_above = pos_hist.flip(0).cumsum(0).flip(0)[1:]  # threshold j: buckets > j are positive
    neg_above = neg_hist.flip(0).cumsum(0).flip(0)[1:]
    counts = {"tp": pos_above, "fp": neg_above, "fn": pos_hist.sum(0) - pos_above, "tn": neg_hist.sum(0) - neg_above}
    if not multi_label:
        counts = {k: v[:, 0] for k, v in counts.items()}
    return counts
