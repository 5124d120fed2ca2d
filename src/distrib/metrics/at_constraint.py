"""Keras's constrained-rate metrics: PrecisionAtRecall, RecallAtPrecision, SensitivityAtSpecificity, SpecificityAtSensitivity.

Each keeps weighted confusion counts at ``num_thresholds`` evenly spaced
thresholds ``0, 1/(n-1), ..., 1`` (summed across replicas) and returns the
best rate among the thresholds where the constrained rate is at least the
target value (0 if none is), as Keras does.

Example:
    >>> m = PrecisionAtRecall(recall=0.5, num_thresholds=3)
    >>> m.update_state([0, 1, 1], [0.7, 0.6, 0.9])
    >>> m.local_result()
    tensor(0.6667)
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from distrib.metrics.base import Metric
from distrib.metrics.thresholds import divide_no_nan, threshold_counts

__all__ = ["PrecisionAtRecall", "RecallAtPrecision", "SensitivityAtSpecificity", "SpecificityAtSensitivity"]


class _AtConstraint(Metric):
    direction = "up"
    _arg = ""

    def __init__(self, value: float, num_thresholds: int = 200, class_id: Optional[int] = None,
                 name: Optional[str] = None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(name, dtype)
        if not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"{type(self).__name__}: {self._arg} must be in [0, 1], got {value}")
        if int(num_thresholds) <= 0:
            raise ValueError(f"{type(self).__name__}: num_thresholds must be an integer > 0, got {num_thresholds}")
        self.value, self.num_thresholds, self.class_id = float(value), int(num_thresholds), class_id
        n = self.num_thresholds
        inner = [(i + 1) / (n - 1) for i in range(n - 2)]
        self.thresholds = [0.5] if n == 1 else [0.0] + inner + [1.0]
        self._threshold_tensor = torch.tensor(self.thresholds, dtype=torch.float64)
        for state in ("true_positives", "false_positives", "true_negatives", "false_negatives"):
            self.add_state(state, (len(self.thresholds),))

    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Optional[Any] = None) -> None:
        thresholds = self._constant_on("_threshold_tensor", y_pred)
        counts = threshold_counts(y_true, y_pred, thresholds, sample_weight, type(self).__name__, self.class_id)
        self._align_device(counts["tp"])
        self.true_positives.add_(counts["tp"])
        self.false_positives.add_(counts["fp"])
        self.true_negatives.add_(counts["tn"])
        self.false_negatives.add_(counts["fn"])

    def _rates(self, states: Dict[str, torch.Tensor]) -> tuple:
        raise NotImplementedError

    def result_from_states(self, states: Dict[str, torch.Tensor]) -> torch.Tensor:
        constrained, dependent = self._rates(states)
        feasible = constrained >= self.value
        return torch.where(feasible, dependent, torch.zeros_like(dependent)).amax().clamp(min=0.0)

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), self._arg: self.value, "num_thresholds": self.num_thresholds,
                "class_id": self.class_id}


def _recall(s: Dict[str, torch.Tensor]) -> torch.Tensor:
    return divide_no_nan(s["true_positives"], s["true_positives"] + s["false_negatives"])


def _precision(s: Dict[str, torch.Tensor]) -> torch.Tensor:
    return divide_no_nan(s["true_positives"], s["true_positives"] + s["false_positives"])


def _specificity(s: Dict[str, torch.Tensor]) -> torch.Tensor:
    return divide_no_nan(s["true_negatives"], s["true_negatives"] + s["false_positives"])


class PrecisionAtRecall(_AtConstraint):
    """Keras's ``PrecisionAtRecall``: the best precision where recall >= ``recall``."""

    _arg = "recall"

    def __init__(self, recall: float, num_thresholds: int = 200, class_id: Optional[int] = None,
                 name: Optional[str] = None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(recall, num_thresholds, class_id, name, dtype)

    def _rates(self, states: Dict[str, torch.Tensor]) -> tuple:
        return _recall(states), _precision(states)


class RecallAtPrecision(_AtConstraint):
    """Keras's ``RecallAtPrecision``: the best recall where precision >= ``precision``."""

    _arg = "precision"

    def __init__(self, precision: float, num_thresholds: int = 200, class_id: Optional[int] = None,
                 name: Optional[str] = None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(precision, num_thresholds, class_id, name, dtype)

    def _rates(self, states: Dict[str, torch.Tensor]) -> tuple:
        return _precision(states), _recall(states)


class SensitivityAtSpecificity(_AtConstraint):
    """Keras's ``SensitivityAtSpecificity``: the best sensitivity where specificity >= ``specificity``."""

    _arg = "specificity"

    def __init__(self, specificity: float, num_thresholds: int = 200, class_id: Optional[int] = None,
                 name: Optional[str] = None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(specificity, num_thresholds, class_id, name, dtype)

    def _rates(self, states: Dict[str, torch.Tensor]) -> tuple:
        return _specificity(states), _recall(states)


class SpecificityAtSensitivity(_AtConstraint):
    """Keras's ``SpecificityAtSensitivity``: the best specificity where sensitivity >= ``sensitivity``."""

    _arg = "sensitivity"

    def __init__(self, sensitivity: float, num_thresholds: int = 200, class_id: Optional[int] = None,
                 name: Optional[str] = None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(sensitivity, num_thresholds, class_id, name, dtype)

    def _rates(self, states: Dict[str, torch.Tensor]) -> tuple:
        return _recall(states), _specificity(states)
