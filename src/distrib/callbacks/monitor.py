"""`MonitorCallback`: the shared logic of callbacks that watch one logged quantity.

``mode="auto"`` decides whether larger or smaller is better: ``loss`` (and
``val_loss``) is minimised; a compiled metric of that name answers through
its ``direction`` (``"up"``/``"down"``); otherwise the name decides
(accuracy, AUC, precision, recall: maximise; error, mse, mae, crossentropy:
minimise). Anything else needs an explicit ``mode``.

Improvement means beating the reference by more than ``min_delta``:

Example:
    >>> cb = MonitorCallback(monitor="val_accuracy", min_delta=0.01)
    >>> cb._is_improvement(0.905, 0.90), cb._is_improvement(0.92, 0.90)
    (False, True)
"""
from __future__ import annotations

import operator
import warnings
from typing import Any, Callable, Dict, Optional

from distrib.callbacks.callback import Callback
from distrib.metrics.base import Metric

__all__ = ["MonitorCallback", "direction_of"]

_UP = ("acc", "auc", "precision", "recall", "f1", "fmeasure")
_DOWN = ("loss", "error", "mse", "mae", "crossentropy")


def direction_of(monitor: str, model: Any = None) -> Optional[str]:
    """``"up"``, ``"down"`` or None for a logged quantity such as ``"val_accuracy"``."""
    name = monitor[4:] if monitor.startswith("val_") else monitor
    if name == "loss":
        return "down"
    for metric in model.metrics if model is not None else []:
        if isinstance(metric, Metric) and metric.name == name and metric.direction in ("up", "down"):
            return metric.direction
    lowered = name.lower()
    if any(key in lowered for key in _DOWN):
        return "down"
    if any(key in lowered for key in _UP):
        return "up"
    return None


class MonitorCallback(Callback):
    """Base of `EarlyStopping` and `ReduceLROnPlateau`.

    Args:
        monitor: the logged quantity to watch.
        mode: ``"auto"``, ``"min"`` or ``"max"``.
        min_delta: the smallest change that counts as an improvement.
    """

    def __init__(self, monitor: str = "val_loss", mode: str = "auto", min_delta: float = 0.0) -> None:
        super().__init__()
        if mode not in ("auto", "min", "max"):
            warnings.warn(f"{type(self).__name__} mode {mode!r} is unknown, using 'auto'", stacklevel=3)
            mode = "auto"
        self.monitor = monitor
        self.mode = mode
        self.min_delta = abs(float(min_delta))
        self.monitor_op: Optional[Callable[[float, float], bool]] = None

    def _set_monitor_op(self) -> None:
        direction = {"min": "down", "max": "up"}.get(self.mode) or direction_of(self.monitor, self.model)
        if direction is None:
            raise ValueError(f"{type(self).__name__}: cannot tell whether {self.monitor!r} should go up or down; "
                             "pass mode='max' or mode='min'")
        self.monitor_op = operator.gt if direction == "up" else operator.lt

    @property
    def _minimising(self) -> bool:
        if self.monitor_op is None:
            self._set_monitor_op()
        return self.monitor_op is operator.lt

    def _is_improvement(self, value: float, reference: Optional[float]) -> bool:
        if self.monitor_op is None:
            self._set_monitor_op()
        if reference is None:
            return True
        delta = -self.min_delta if self._minimising else self.min_delta
        return bool(self.monitor_op(value - delta, reference))

    def _monitored(self, logs: Optional[Dict[str, Any]]) -> Optional[float]:
        logs = logs or {}
        value = logs.get(self.monitor)
        if value is None:
            warnings.warn(f"{type(self).__name__} is conditioned on {self.monitor!r}, which is not in the logs; "
                          f"available: {', '.join(logs) or 'none'}", stacklevel=3)
            return None
        return float(value)
