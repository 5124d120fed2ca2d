"""Read and set the learning rate of whatever ``model.optimizer`` is.

`distrib.Model` exposes either a distrib optimizer (with a ``learning_rate``
property) or a raw ``torch.optim.Optimizer`` (whose rate lives in each
param group's ``"lr"``). Callbacks go through these two functions so they
work with both.

Example:
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> set_learning_rate(opt, 0.05)
    >>> get_learning_rate(opt), opt.param_groups[0]["lr"]
    (0.05, 0.05)
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distrib.optimizers.optimizer_parts import param_groups_of

__all__ = ["get_learning_rate", "set_learning_rate", "LearningRateValue"]


class LearningRateValue(float):
    """A learning rate read from an optimizer: a float that also answers Keras's variable calls.

    Keras code reads ``model.optimizer.learning_rate`` as a variable, e.g. the
    tutorials' ``PrintLR`` callback prints ``model.optimizer.learning_rate.numpy()``.
    This is a plain ``float`` (arithmetic, comparisons, ``float(...)`` and
    formatting behave as usual) with ``numpy()`` and ``value()`` added.

    Example:
        >>> lr = LearningRateValue(1e-3)
        >>> lr * 10, lr.numpy(), f"{lr:.0e}"
        (0.01, np.float32(0.001), '1e-03')
    """

    def numpy(self) -> np.float32:
        """The rate as a numpy float32 scalar (Keras's variable dtype)."""
        return np.float32(self)

    def value(self) -> float:
        return float(self)

    def __repr__(self) -> str:
        return float.__repr__(self)


def get_learning_rate(optimizer: Any) -> float:
    """The learning rate as a Python float (the first param group's for torch optimizers)."""
    if optimizer is None:
        raise ValueError("the model has no optimizer: compile it with an optimizer first")
    if hasattr(optimizer, "learning_rate"):
        return float(optimizer.learning_rate)  # a LearningRateValue is a float; keep the plain type here
    groups = param_groups_of(optimizer)
    if groups:
        return float(groups[0]["lr"])
    raise TypeError(f"cannot read the learning rate of {type(optimizer).__name__}: expected a distrib optimizer "
                    "or a torch.optim.Optimizer")


def set_learning_rate(optimizer: Any, value: float) -> None:
    """Set the learning rate (every param group's ``"lr"`` for torch optimizers)."""
    value = float(value)
    if optimizer is None:
        raise ValueError("the model has no optimizer: compile it with an optimizer first")
    if hasattr(optimizer, "learning_rate"):
        optimizer.learning_rate = value
        return
    groups = param_groups_of(optimizer)
    if groups is None:
        raise TypeError(f"cannot set the learning rate of {type(optimizer).__name__}: expected a distrib "
                        "optimizer or a torch.optim.Optimizer")
    for group in groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(value)
        else:
            group["lr"] = value
