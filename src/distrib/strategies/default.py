"""`DefaultStrategy`: what `distrib.get_strategy()` returns outside every scope.

One replica, the CPU, no communication, no placement: code written for a
strategy runs unchanged with none. `default_strategy()` is the process's
one instance (the one `get_strategy()` returns); constructing another gives
an equivalent strategy.

Example:
    >>> distrib.get_strategy() is default_strategy()
    True
    >>> with default_strategy().scope():
    ...     model = torch.nn.Linear(2, 2)     # left where torch put it
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from distrib.strategies import context
from distrib.strategies.base import ReplicatedStrategy
from distrib.strategies.interface import Strategy

__all__ = ["DefaultStrategy", "default_strategy", "get_strategy"]


class DefaultStrategy(ReplicatedStrategy):
    """The pass-through strategy: its scope captures nothing and `run` moves nothing."""

    def __init__(self) -> None:
        super().__init__(device=torch.device("cpu"))

    @contextlib.contextmanager
    def scope(self) -> Iterator["DefaultStrategy"]:
        """Make this the current strategy; modules created inside stay as torch made them."""
        context.push(self)
        try:
            yield self
        finally:
            context.pop(self)

    def track_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Nothing to adopt: the module is returned as it is."""
        return module

    def run(self, fn: Callable, args: Sequence = (), kwargs: Optional[dict] = None) -> Any:
        """Call ``fn`` as the single replica; inputs stay where they are."""
        with context.replica_context(self):
            return fn(*args, **(kwargs or {}))


context.register_default_type(DefaultStrategy)

_instance: Optional[DefaultStrategy] = None
_lock = threading.Lock()


def default_strategy() -> DefaultStrategy:
    """The process's default strategy (created on first use)."""
    global _instance
    with _lock:
        if _instance is None:
            _instance = DefaultStrategy()
        return _instance


def get_strategy() -> "Strategy":
    """The strategy of the innermost scope, or the default strategy outside any scope."""
    current = context.current_scope_strategy()
    return current if current is not None else default_strategy()
