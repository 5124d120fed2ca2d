"""Keras learning-rate schedules (``distrib.optimizers.schedules``): the rate as a function of the step.

Give one as an optimizer's ``learning_rate``; before every step the optimizer
sets the rate to ``schedule(iterations)``, where ``iterations`` counts the
steps taken so far (from 0). The counter lives in the torch optimizer's first
param group (``"iterations"``), so it is saved and restored with the
optimizer's state (``model.save``, checkpoints, `BackupAndRestore`).
``optimizer.learning_rate`` reads the rate the next step will use.

Example:
    >>> lr = distrib.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    >>> [round(lr(step), 4) for step in (0, 10, 20)]
    [0.1, 0.05, 0.025]
    >>> opt = distrib.optimizers.SGD(learning_rate=lr)
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence

__all__ = ["LearningRateSchedule", "ExponentialDecay", "PiecewiseConstantDecay", "deserialize"]


class LearningRateSchedule:
    """Base class: ``__call__(step) -> float`` and ``get_config()``."""

    def __call__(self, step: int) -> float:
        raise NotImplementedError

    def get_config(self) -> Dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "LearningRateSchedule":
        return cls(**config)


class ExponentialDecay(LearningRateSchedule):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)`` (floored exponent with ``staircase``)."""

    def __init__(self, initial_learning_rate: float, decay_steps: int, decay_rate: float, staircase: bool = False,
                 name: str = "ExponentialDecay") -> None:
        if decay_steps <= 0:
            raise ValueError(f"ExponentialDecay: decay_steps must be > 0, got {decay_steps!r}")
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = int(decay_steps)
        self.decay_rate = float(decay_rate)
        self.staircase = bool(staircase)
        self.name = name

    def __call__(self, step: int) -> float:
        p = step / self.decay_steps
        return self.initial_learning_rate * self.decay_rate ** (math.floor(p) if self.staircase else p)

    def get_config(self) -> Dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "decay_rate": self.decay_rate, "staircase": self.staircase, "name": self.name}


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[i]`` while ``boundaries[i-1] < step <= boundaries[i]`` (Keras's boundaries are inclusive)."""

    def __init__(self, boundaries: Sequence[int], values: Sequence[float], name: str = "PiecewiseConstant") -> None:
        if len(values) != len(boundaries) + 1:
            raise ValueError(f"PiecewiseConstantDecay: values needs len(boundaries) + 1 = {len(boundaries) + 1} "
                             f"entries, got {len(values)}")
        self.boundaries: List[int] = [int(b) for b in boundaries]
        self.values: List[float] = [float(v) for v in values]
        self.name = name

    def __call__(self, step: int) -> float:
        for boundary, value in zip(self.boundaries, self.values):
            if step <= boundary:
                return value
        return self.values[-1]

    def get_config(self) -> Dict[str, Any]:
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


CLASSES = {"ExponentialDecay": ExponentialDecay, "PiecewiseConstantDecay": PiecewiseConstantDecay}


def serialize(schedule: LearningRateSchedule) -> Dict[str, Any]:
    """``{"schedule": class name, "config": {...}}`` (what an optimizer's ``get_config`` records)."""
    name = type(schedule).__name__
    if CLASSES.get(name) is not type(schedule):
        raise ValueError(f"cannot save learning-rate schedule {name}: only {', '.join(CLASSES)} are saved")
    return {"schedule": name, "config": schedule.get_config()}


def deserialize(config: Dict[str, Any]) -> LearningRateSchedule:
    """Rebuild what `serialize` wrote (only the classes of this module)."""
    cls = CLASSES.get(str(config.get("schedule")))
    if cls is None:
        raise ValueError(f"unknown learning-rate schedule {config.get('schedule')!r}; known: {', '.join(CLASSES)}")
    return cls.from_config(dict(config.get("config") or {}))
