"""Keras-style config: an object's ``get_config()`` and its class's ``from_config(config)``.

Both are optional on user objects (a torch module, a loss function class), so
these two are the one place that asks; callers get the bound method, or None
where there is none, and decide what to do without it.

Example:
    >>> get_config_of(distrib.metrics.Mean())()
    {'name': 'mean', 'dtype': 'float32'}
    >>> get_config_of(torch.nn.Linear(2, 1)) is None, from_config_of(torch.nn.Linear) is None
    (True, True)
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

__all__ = ["get_config_of", "from_config_of"]


def get_config_of(obj: Any) -> Optional[Callable[[], Dict[str, Any]]]:
    """``obj.get_config`` where it is callable, else None."""
    method = getattr(obj, "get_config", None)  # duck-typed user object: Keras-style config is optional
    return method if callable(method) else None


def from_config_of(cls: Any) -> Optional[Callable[[Dict[str, Any]], Any]]:
    """``cls.from_config`` where it is callable, else None."""
    method = getattr(cls, "from_config", None)  # duck-typed user class: Keras-style config is optional
    return method if callable(method) else None
