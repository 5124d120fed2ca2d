"""The strategy context stack: which strategy is current, and in which context.

``with strategy.scope():`` pushes a strategy; leaving pops it and restores the
previous one, so scopes nest. Outside every scope the current strategy is the
process's default strategy (`distrib.strategies.default.get_strategy` falls
back to it: this module sits below every strategy class and builds none).
Code inside `Strategy.run` is in a *replica* context; everywhere else is the
*cross-replica* context.

Example:
    >>> s = distrib.OneDeviceStrategy("cpu")
    >>> distrib.has_strategy()
    False
    >>> with s.scope():
    ...     distrib.get_strategy() is s, distrib.in_cross_replica_context()
    (True, True)
"""
from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, List, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["has_strategy", "in_cross_replica_context", "get_replica_context"]


_job_strategy: "Optional[weakref.ref]" = None


def register_job_strategy(strategy: "Strategy") -> None:
    """Record the multi-replica strategy this process joined (one job per process)."""
    global _job_strategy
    _job_strategy = weakref.ref(strategy)


def job_strategy() -> Optional["Strategy"]:
    """The multi-replica strategy this process joined, in or out of its scope; else None.

    Checkpoint saving uses it so that objects created and saved outside any
    scope (as TensorFlow's multi-worker custom-loop tutorial does) still follow
    the chief-writes rule.
    """
    return _job_strategy() if _job_strategy is not None else None


class _Stack(threading.local):
    def __init__(self) -> None:
        self.strategies: List["Strategy"] = []
        self.replica_depth = 0


_STATE = _Stack()


def push(strategy: "Strategy") -> None:
    _STATE.strategies.append(strategy)


def pop(strategy: "Strategy") -> None:
    if not _STATE.strategies or _STATE.strategies[-1] is not strategy:
        raise RuntimeError("strategy scopes were exited out of order; use `with strategy.scope():`")
    _STATE.strategies.pop()


def current_scope_strategy() -> Optional["Strategy"]:
    """The strategy of the innermost open scope, or None."""
    return _STATE.strategies[-1] if _STATE.strategies else None


_default_types: Tuple[type, ...] = ()


def register_default_type(cls: type) -> None:
    """Name the class of the pass-through default strategy (`distrib.strategies.default` does, once).

    Until that module is imported no default strategy exists, so none is mistaken for one.
    """
    global _default_types
    _default_types = (cls,)


def is_default_strategy(strategy: "Strategy") -> bool:
    """True for the pass-through strategy `get_strategy()` returns outside every scope."""
    return isinstance(strategy, _default_types)


def has_strategy() -> bool:
    """True inside the scope of a non-default strategy."""
    s = current_scope_strategy()
    return s is not None and not is_default_strategy(s)


def in_cross_replica_context() -> bool:
    """False while `Strategy.run` executes a replica function, True elsewhere."""
    return _STATE.replica_depth == 0


class ReplicaContext:
    """What a replica function can ask about itself (``distrib.get_replica_context()``)."""

    def __init__(self, strategy: "Strategy") -> None:
        self.strategy = strategy

    @property
    def replica_id_in_sync_group(self) -> int:
        return self.strategy.replica_id

    @property
    def num_replicas_in_sync(self) -> int:
        return self.strategy.num_replicas_in_sync

    def all_reduce(self, op, value):
        return self.strategy.reduce(op, value, axis=None)


class replica_context:
    """Context manager `Strategy.run` uses to mark the replica context."""

    def __init__(self, strategy: "Strategy") -> None:
        self.strategy = strategy

    def __enter__(self) -> ReplicaContext:
        _STATE.replica_depth += 1
        push(self.strategy)
        return ReplicaContext(self.strategy)

    def __exit__(self, *exc) -> None:
        pop(self.strategy)
        _STATE.replica_depth -= 1


def get_replica_context() -> Optional[ReplicaContext]:
    """The replica context inside `Strategy.run`, else None (TF returns a default one outside scopes)."""
    if _STATE.replica_depth == 0:
        return None
    s = current_scope_strategy()
    return ReplicaContext(s) if s is not None else None
