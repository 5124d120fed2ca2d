"""`Model.__call__` as a TensorFlow program calls it: ``model(x, training=True)``, numpy inputs.

* ``training=True`` / ``False`` runs that one call in torch's train / eval
  mode and puts every submodule's own mode back afterwards (a module whose
  ``forward`` takes ``training`` itself, such as a Keras 3 layer, gets the
  argument instead); ``training=None`` leaves the modes alone.
* numpy arrays become tensors on the module's device; floating ones take the
  module's parameter dtype, as `fit` casts them (``float64`` data on a
  ``float32`` network).

Example:
    >>> model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)))
    >>> model.module.eval()
    >>> _ = model(np.ones((1, 2)), training=True)   # dropout active for this call
    >>> model.module.training
    False
"""
from __future__ import annotations

import inspect
from typing import Any, Optional

import numpy as np
import torch

from distrib.utils.nest import map_structure

__all__ = ["call_module"]


def _takes_training(module: torch.nn.Module) -> bool:
    try:
        if "training" in inspect.signature(module.forward).parameters:
            return True
    except (TypeError, ValueError):
        return False
    return any(klass.__module__.split(".")[0] == "keras" for klass in type(module).__mro__)


def _as_input(value: Any, dtype: Optional[torch.dtype], device: torch.device) -> Any:
    if not isinstance(value, np.ndarray):
        return value
    tensor = torch.from_numpy(np.ascontiguousarray(value))
    if dtype is not None and tensor.is_floating_point():
        tensor = tensor.to(dtype)
    return tensor.to(device)


def call_module(module: torch.nn.Module, args: tuple, kwargs: dict, training: Optional[bool]) -> Any:
    """``module(*args, **kwargs)`` with numpy inputs converted and ``training`` applied for this call."""
    first = next((p for p in module.parameters() if p.is_floating_point()), None)
    dtype, device = (first.dtype, first.device) if first is not None else (None, torch.device("cpu"))
    args = map_structure(lambda v: _as_input(v, dtype, device), tuple(args))
    kwargs = {k: map_structure(lambda v: _as_input(v, dtype, device), v) for k, v in kwargs.items()}
    if training is None:
        return module(*args, **kwargs)
    if _takes_training(module):
        return module(*args, training=bool(training), **kwargs)
    modes = [(m, m.training) for m in module.modules()]
    module.train(bool(training))
    try:
        return module(*args, **kwargs)
    finally:
        for m, mode in modes:
            m.training = mode
