"""Resolve what users pass as ``optimizer=``: Keras names, distrib optimizers, torch optimizers.

Example:
    >>> get("rmsprop")
    RMSprop(name='rmsprop', learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-07, centered=False)
    >>> get("sgd").learning_rate
    0.01

A ``torch.optim.Optimizer`` instance is returned unchanged. `serialize` /
`deserialize` round-trip built-in optimizers through JSON; only the classes
listed here can be deserialised, never an arbitrary import.
"""
from __future__ import annotations

from typing import Any, Dict, Union

import torch

from distrib.optimizers.adadelta_ftrl import Adadelta, Ftrl
from distrib.optimizers.adam import Adam, AdamW
from distrib.optimizers.adam_variants import Adamax, Lion, Nadam
from distrib.optimizers.base import Optimizer
from distrib.optimizers.rmsprop import Adagrad, RMSprop
from distrib.optimizers.sgd import SGD
from distrib.utils.registry import ClassRegistry

__all__ = ["get", "serialize", "deserialize", "CLASSES", "ALIASES"]

CLASSES: Dict[str, type] = {cls.__name__: cls for cls in (SGD, Adam, AdamW, RMSprop, Adagrad, Nadam, Adamax,
                                                           Lion, Adadelta, Ftrl)}
ALIASES: Dict[str, type] = {name.lower(): cls for name, cls in CLASSES.items()}


def get(identifier: Any) -> Union[Optimizer, torch.optim.Optimizer]:
    """An optimizer for ``identifier``.

    Args:
        identifier: ``"sgd"``, ``"adam"``, ``"adamw"``, ``"rmsprop"``,
            ``"adagrad"``, ``"nadam"``, ``"adamax"``, ``"lion"``, ``"adadelta"``,
            ``"ftrl"`` (Keras defaults; class names also work), a distrib
            `Optimizer`, a dict from `serialize`, or a ``torch.optim.Optimizer``
            (returned as is).
    """
    if isinstance(identifier, (Optimizer, torch.optim.Optimizer)):
        return identifier
    if isinstance(identifier, str):
        cls = ALIASES.get(identifier.lower()) or CLASSES.get(identifier)
        if cls is None:
            raise ValueError(f"unknown optimizer {identifier!r}; use one of {sorted(ALIASES)}, a "
                             "distrib.optimizers object or a torch.optim optimizer")
        return cls()
    if isinstance(identifier, dict):
        return deserialize(identifier)
    raise TypeError(f"optimizer must be a Keras optimizer name, a distrib.optimizers object or a "
                    f"torch.optim.Optimizer, got {type(identifier).__name__}")


_REGISTRY = ClassRegistry("optimizer", CLASSES)


def serialize(optimizer: Optimizer) -> Dict[str, Any]:
    """``{"class_name": ..., "config": {...}}`` for a built-in distrib optimizer (JSON-serialisable)."""
    return _REGISTRY.serialize(optimizer)


def deserialize(config: Dict[str, Any]) -> Optimizer:
    """The (unbuilt) optimizer `serialize` described; only built-in classes are accepted."""
    return _REGISTRY.deserialize(config)
