"""`AUC`: area under the ROC or precision-recall curve, from bucketed thresholds like Keras.

The state is four confusion-matrix histograms over ``num_thresholds``
thresholds (``-eps``, ``1/(n-1)``, ..., ``(n-2)/(n-1)``, ``1+eps``); a
prediction counts as positive at a threshold when it is strictly greater.
Updating costs one ``bucketize`` and two ``bincount``s, never a host sync, and
the histograms sum across replicas, so the global AUC is exact for the pooled
data (up to the bucketing).

Example:
    >>> m = AUC(num_thresholds=3)           # thresholds [-1e-7, 0.5, 1 + 1e-7]
    >>> m.update_state(torch.tensor([0, 0, 1, 1]), torch.tensor([0.0, 0.5, 0.3, 0.9]))
    >>> m.local_result()
    tensor(0.7500)

With ``multi_label=True`` predictions are ``(batch, labels)``: the
histograms are kept per label (created at the first update unless
``num_labels`` is given) and the result is the mean of the labels' AUCs
(weighted by ``label_weights`` when given), like Keras. Otherwise every
prediction is one binary decision.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import torch

from distrib.metrics.base import Metric
from distrib.metrics.thresholds import divide_no_nan, threshold_counts

__all__ = ["AUC"]

_EPSILON = 1e-7


class AUC(Metric):
    """Keras's ``AUC`` (single-label).

    Args:
        num_thresholds: number of thresholds (> 1) when ``thresholds`` is not given.
        curve: ``"ROC"`` or ``"PR"``.
        summation_method: ``"interpolation"`` (trapezoids for ROC, Davis &
            Goadrich interpolation for PR), ``"minoring"`` or ``"majoring"``.
        name: the metric's name.
        dtype: dtype of the result.
        thresholds: explicit thresholds in [0, 1] (the two end points are added).
        multi_label: one AUC per label column, averaged.
        num_labels: the number of label columns (multi_label only; else taken
            from the first batch).
        label_weights: weights of the labels' AUCs in the average (multi_label only).
        from_logits: apply a sigmoid to predictions first.
    """

    direction = "up"
    builds_state_on_first_update = True

    def __init__(self, num_thresholds: int = 200, curve: str = "ROC", summation_method: str = "interpolation",
                 name: Optional[str] = None, dtype: Optional[torch.dtype] = None,
                 thresholds: Optional[Sequence[float]] = None, multi_label: bool = False,
                 num_labels: Optional[int] = None, label_weights: Optional[Sequence[float]] = None,
                 from_logits: bool = False) -> None:
        super().__init__(name or "auc", dtype)
        if curve.upper() not in ("ROC", "PR"):
            raise ValueError(f"AUC curve={curve!r} is not supported; use 'ROC' or 'PR'")
        if summation_method not in ("interpolation", "minoring", "majoring"):
            raise ValueError(f"AUC summation_method={summation_method!r} is not supported; "
                             "use 'interpolation', 'minoring' or 'majoring'")
        if thresholds is not None:
            inner: List[float] = sorted(float(t) for t in thresholds)
        else:
            if int(num_thresholds) <= 1:
                raise ValueError(f"AUC num_thresholds must be an integer > 1, got {num_thresholds}")
            inner = [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)]
        self._inner_thresholds = None if thresholds is None else inner
        self.num_thresholds = len(inner) + 2
        self.curve = curve.upper()
        self.summation_method = summation_method
        self.from_logits = bool(from_logits)
        self._thresholds = torch.tensor([0.0 - _EPSILON] + inner + [1.0 + _EPSILON], dtype=torch.float64)
        self.multi_label = bool(multi_label)
        if num_labels is not None and not self.multi_label:
            raise ValueError("AUC: num_labels is only for multi_label=True")
        self.num_labels = None if num_labels is None else int(num_labels)
        self.label_weights = None if label_weights is None else [float(w) for w in label_weights]
        if not self.multi_label:
            self._build(())
        elif self.num_labels is not None:
            self._build((self.num_labels,))

    def _build(self, label_shape: tuple) -> None:
        for state in ("true_positives", "false_positives", "true_negatives", "false_negatives"):
            self.add_state(state, (self.num_thresholds,) + label_shape)

    @property
    def thresholds(self) -> List[float]:
        return self._thresholds.tolist()

    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Optional[Any] = None) -> None:
        pred = y_pred if isinstance(y_pred, torch.Tensor) else torch.as_tensor(y_pred)
        if self.from_logits:
            pred = torch.sigmoid(pred)
        if "true_positives" not in self._state_names:
            if pred.dim() != 2:
                raise ValueError(f"AUC(multi_label=True) needs predictions of shape (batch, labels), "
                                 f"got {tuple(pred.shape)}")
            self.num_labels = int(pred.shape[1])
            self._build((self.num_labels,))
        counts = threshold_counts(y_true, pred, self._constant_on("_thresholds", pred), sample_weight, "AUC",
                                  multi_label=self.multi_label)
        self._align_device(counts["tp"])
        self.true_positives.add_(counts["tp"])
        self.false_positives.add_(counts["fp"])
        self.false_negatives.add_(counts["fn"])
        self.true_negatives.add_(counts["tn"])

    def result_from_states(self, states: Dict[str, torch.Tensor]) -> torch.Tensor:
        if "true_positives" not in states:
            return torch.zeros((), dtype=torch.float64)
        tp, fp = states["true_positives"], states["false_positives"]
        tn, fn = states["true_negatives"], states["false_negatives"]
        if self.curve == "PR" and self.summation_method == "interpolation":
            return self._over_labels(self._interpolate_pr_auc(tp, fp, fn))
        recall = divide_no_nan(tp, tp + fn)
        if self.curve == "ROC":
            x, y = divide_no_nan(fp, fp + tn), recall
        else:
            x, y = recall, divide_no_nan(tp, tp + fp)
        if self.summation_method == "interpolation":
            heights = (y[:-1] + y[1:]) / 2.0
        elif self.summation_method == "minoring":
            heights = torch.minimum(y[:-1], y[1:])
        else:
            heights = torch.maximum(y[:-1], y[1:])
        return self._over_labels((x[:-1] - x[1:]) * heights)

    def _over_labels(self, terms: torch.Tensor) -> torch.Tensor:
        by_label = terms.sum(0)
        if not self.multi_label:
            return by_label
        if self.label_weights is None:
            return by_label.mean()
        weights = torch.tensor(self.label_weights, dtype=by_label.dtype, device=by_label.device)
        return divide_no_nan((by_label * weights).sum(), weights.sum())

    @staticmethod
    def _interpolate_pr_auc(tp: torch.Tensor, fp: torch.Tensor, fn: torch.Tensor) -> torch.Tensor:
        """PR AUC with precision interpolated between thresholds (Davis & Goadrich 2006), like Keras."""
        dtp = tp[:-1] - tp[1:]
        p = tp + fp
        dp = p[:-1] - p[1:]
        slope = divide_no_nan(dtp, dp.clamp(min=0))
        intercept = tp[1:] - slope * p[1:]
        both_positive = (p[:-1] > 0) & (p[1:] > 0)
        ratio = torch.where(both_positive, divide_no_nan(p[:-1], p[1:].clamp(min=0)), torch.ones_like(p[1:]))
        return divide_no_nan(slope * (dtp + intercept * ratio.log()), (tp[1:] + fn[1:]).clamp(min=0))

    def get_config(self) -> Dict[str, Any]:
        config: Dict[str, Any] = {**super().get_config(), "num_thresholds": self.num_thresholds,
                                  "curve": self.curve, "summation_method": self.summation_method,
                                  "from_logits": self.from_logits, "multi_label": self.multi_label,
                                  "num_labels": self.num_labels, "label_weights": self.label_weights}
        if self._inner_thresholds is not None:
            config["thresholds"] = list(self._inner_thresholds)
        return config
