"""Keras learning-rate schedules (``distrib.optimizers.schedules``): the rate as a function of the step.

Give one as an optimizer's ``learning_rate``; every step uses the rate
``schedule(iterations)``, where ``iterations`` counts the steps taken so far
(from 0). The count is kept with the optimizer's state, so it is saved and
restored with it (``model.save``, checkpoints, `BackupAndRestore`), and the
schedule (as its config) is a param-group entry, so parameter-server tasks
apply it too.
``optimizer.learning_rate`` reads the rate the next step will use.

Example:
    >>> lr = distrib.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    >>> [round(lr(step), 4) for step in (0, 10, 20)]
    [0.1, 0.05, 0.025]
    >>> opt = distrib.optimizers.SGD(learning_rate=lr)
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from distrib.utils.public_names import public_dir

__all__ = ["LearningRateSchedule", "ExponentialDecay", "PiecewiseConstantDecay", "PolynomialDecay",
           "InverseTimeDecay", "CosineDecay", "CosineDecayRestarts", "serialize", "deserialize"]


def __dir__() -> "list[str]":
    return public_dir(globals(), __all__)


_F = np.float32  # Keras computes schedules in the initial rate's dtype, float32


def _positive(who: str, name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{who}: {name} must be > 0, got {value!r}")
    return value


class LearningRateSchedule:
    """Base class: ``__call__(step) -> float`` and ``get_config()``."""

    def __call__(self, step: int) -> float:
        raise NotImplementedError

    def get_config(self) -> Dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "LearningRateSchedule":
        return cls(**config)


class _StepRatioDecay(LearningRateSchedule):
    """Shared by `ExponentialDecay` and `InverseTimeDecay`: arguments, config and ``step / decay_steps``."""

    default_name = ""

    def __init__(self, initial_learning_rate: float, decay_steps: int, decay_rate: float, staircase: bool = False,
                 name: Optional[str] = None) -> None:
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = _positive(type(self).__name__, "decay_steps", decay_steps)
        self.decay_rate = float(decay_rate)
        self.staircase = bool(staircase)
        self.name = name or self.default_name

    def _ratio(self, step: int) -> Any:
        p = _F(step) / _F(self.decay_steps)
        return np.floor(p) if self.staircase else p

    def get_config(self) -> Dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "decay_rate": self.decay_rate, "staircase": self.staircase, "name": self.name}


class ExponentialDecay(_StepRatioDecay):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)`` (floored exponent with ``staircase``)."""

    default_name = "ExponentialDecay"

    def __call__(self, step: int) -> float:
        return float(_F(self.initial_learning_rate) * np.power(_F(self.decay_rate), self._ratio(step)))


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


class PolynomialDecay(LearningRateSchedule):
    """``(initial - end) * (1 - step / decay_steps) ** power + end``; step capped at ``decay_steps``.

    With ``cycle`` the horizon grows to the next multiple of ``decay_steps``
    past ``step`` instead of the step being capped (Keras's rule).

    Example:
        >>> [round(PolynomialDecay(1.0, 10, 0.1)(s), 3) for s in (0, 5, 10, 20)]
        [1.0, 0.55, 0.1, 0.1]
    """

    def __init__(self, initial_learning_rate: float, decay_steps: int, end_learning_rate: float = 0.0001,
                 power: float = 1.0, cycle: bool = False, name: str = "PolynomialDecay") -> None:
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = _positive("PolynomialDecay", "decay_steps", decay_steps)
        self.end_learning_rate = float(end_learning_rate)
        self.power = float(power)
        self.cycle = bool(cycle)
        self.name = name

    def __call__(self, step: int) -> float:
        initial, end = _F(self.initial_learning_rate), _F(self.end_learning_rate)
        step_f, decay_steps = _F(step), _F(self.decay_steps)
        if self.cycle:
            multiplier = _F(1.0) if step_f == 0 else np.ceil(step_f / decay_steps)
            decay_steps = decay_steps * multiplier
        else:
            step_f = min(step_f, decay_steps)
        p = step_f / decay_steps
        return float((initial - end) * np.power(_F(1) - p, _F(self.power)) + end)

    def get_config(self) -> Dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "end_learning_rate": self.end_learning_rate, "power": self.power, "cycle": self.cycle,
                "name": self.name}


class InverseTimeDecay(_StepRatioDecay):
    """``initial / (1 + decay_rate * step / decay_steps)`` (floored ratio with ``staircase``)."""

    default_name = "InverseTimeDecay"

    def __call__(self, step: int) -> float:
        return float(_F(self.initial_learning_rate) / (_F(1) + _F(self.decay_rate) * self._ratio(step)))


def _cosine(fraction: Any, alpha: float) -> Any:
    decayed = _F(0.5) * (_F(1) + np.cos(_F(math.pi) * fraction))
    return (_F(1) - _F(alpha)) * decayed + _F(alpha)


class CosineDecay(LearningRateSchedule):
    """Cosine decay from the rate to ``alpha`` times it over ``decay_steps``, after an optional linear warmup.

    Without ``warmup_target``: ``initial * ((1 - alpha) * 0.5 * (1 + cos(pi * t / decay_steps)) + alpha)``
    with ``t = min(step, decay_steps)``. With it: a linear ramp from
    ``initial_learning_rate`` to ``warmup_target`` over ``warmup_steps``,
    then the cosine decay from ``warmup_target``.

    Example:
        >>> lr = CosineDecay(0.0, decay_steps=100, warmup_target=0.1, warmup_steps=10)
        >>> [round(lr(s), 4) for s in (0, 5, 10, 60, 110)]
        [0.0, 0.05, 0.1, 0.05, 0.0]
    """

    def __init__(self, initial_learning_rate: float, decay_steps: int, alpha: float = 0.0, name: str = "CosineDecay",
                 warmup_target: Optional[float] = None, warmup_steps: int = 0) -> None:
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = _positive("CosineDecay", "decay_steps", decay_steps)
        self.alpha = float(alpha)
        self.name = name
        self.warmup_target = None if warmup_target is None else float(warmup_target)
        self.warmup_steps = warmup_steps

    def __call__(self, step: int) -> float:
        initial, decay_steps = _F(self.initial_learning_rate), _F(self.decay_steps)
        step_f = _F(step)
        if self.warmup_target is None:
            return float(initial * _cosine(min(step_f, decay_steps) / decay_steps, self.alpha))
        target, warmup = _F(self.warmup_target), _F(self.warmup_steps)
        step_f = min(step_f, decay_steps + warmup)
        if step_f < warmup:
            return float((target - initial) * (step_f / warmup) + initial)
        return float(target * _cosine((step_f - warmup) / decay_steps, self.alpha))

    def get_config(self) -> Dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "alpha": self.alpha, "name": self.name, "warmup_target": self.warmup_target,
                "warmup_steps": self.warmup_steps}


class CosineDecayRestarts(LearningRateSchedule):
    """Cosine decay with warm restarts (SGDR): periods grow by ``t_mul``, peaks by ``m_mul``.

    Example:
        >>> lr = CosineDecayRestarts(1.0, first_decay_steps=10)
        >>> [round(lr(s), 3) for s in (0, 5, 10, 20, 30)]        # restarts at 10 and 30
        [1.0, 0.5, 1.0, 0.5, 1.0]
    """

    def __init__(self, initial_learning_rate: float, first_decay_steps: int, t_mul: float = 2.0,
                 m_mul: float = 1.0, alpha: float = 0.0, name: str = "SGDRDecay") -> None:
        self.initial_learning_rate = float(initial_learning_rate)
        self.first_decay_steps = _positive("CosineDecayRestarts", "first_decay_steps", first_decay_steps)
        self.t_mul, self.m_mul = float(t_mul), float(m_mul)
        self.alpha = float(alpha)
        self.name = name

    def __call__(self, step: int) -> float:
        t_mul = _F(self.t_mul)
        fraction = _F(step) / _F(self.first_decay_steps)
        if t_mul == _F(1):
            i_restart = np.floor(fraction)
            fraction = fraction - i_restart
        else:
            i_restart = np.floor(np.log(_F(1) - fraction * (_F(1) - t_mul)) / np.log(t_mul))
            sum_r = (_F(1) - np.power(t_mul, i_restart)) / (_F(1) - t_mul)
            fraction = (fraction - sum_r) / np.power(t_mul, i_restart)
        m_fac = np.power(_F(self.m_mul), i_restart)
        cosine = _F(0.5) * m_fac * (_F(1) + np.cos(_F(math.pi) * fraction))
        alpha = _F(self.alpha)
        return float(_F(self.initial_learning_rate) * ((_F(1) - alpha) * cosine + alpha))

    def get_config(self) -> Dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "first_decay_steps": self.first_decay_steps,
                "t_mul": self.t_mul, "m_mul": self.m_mul, "alpha": self.alpha, "name": self.name}


CLASSES = {cls.__name__: cls for cls in (ExponentialDecay, PiecewiseConstantDecay, PolynomialDecay,
                                         InverseTimeDecay, CosineDecay, CosineDecayRestarts)}


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
