"""What `fit`, `evaluate` and `predict` check before they run: scope, compile state, arguments.

Each check raises one line that names the call and the fix, before any step
runs (no weight changes, no collective started). `hint_if_alone_on_a_busy_machine`
only warns.

Example:
    >>> check_steps("evaluate", 0)
    Traceback (most recent call last):
    ValueError: evaluate(steps=...) must be a positive int or None, got 0
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Optional

import torch

from distrib.comm.optimizer_hook import unreplicated_steps
from distrib.strategies import context
from distrib.strategies.local_replicas import replica_process

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["check_scope", "check_steps", "hint_if_alone_on_a_busy_machine", "require_compiled",
           "unreplicated_training"]


def check_scope(strategy: "Strategy", what: str) -> None:
    """Raise if ``model.<what>()`` runs under another strategy's scope, or alone in a multi-worker job."""
    current = context.current_scope_strategy()
    if current is not None and current is not strategy:
        raise RuntimeError(
            f"model.{what}() called under {type(current).__name__}.scope() but the model was created "
            f"under {type(strategy).__name__}: create (and compile) the model inside the scope of "
            "the strategy that runs it")
    # Only training alone is refused: evaluating/predicting an unreplicated model is TF's behaviour too.
    # In a local-replica process an unreplicated model trains as in TF's one process (replica_process);
    # one made in a OneDeviceStrategy's scope trains alone in each worker on purpose, as in TF.
    if (what == "fit" and context.is_default_strategy(strategy) and _distributed_world_size() > 1
            and replica_process.current() is None):
        raise RuntimeError(
            f"model.{what}(): this process is one of {_distributed_world_size()} workers but the model was "
            "created outside any strategy scope, so it would train alone; create it inside "
            "`with strategy.scope():`")


def require_compiled(compiled: bool, has_loss: bool, what: str) -> None:
    """Raise unless `compile` ran (with a loss, for fit and evaluate)."""
    if not compiled:
        raise RuntimeError(f"model.{what}() needs a compiled model: call model.compile(optimizer=..., "
                           f"loss=...) first")
    if not has_loss and what in ("fit", "evaluate"):
        raise RuntimeError(f"model.{what}() needs a loss: call model.compile(loss=...) with a loss")


def check_steps(what: str, steps: Optional[int]) -> None:
    """Raise unless ``steps`` is a positive int or None."""
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise ValueError(f"{what}(steps=...) must be a positive int or None, got {steps!r}")


def unreplicated_training(strategy: "Strategy", module: torch.nn.Module) -> Any:
    """An unreplicated model trained in a local-replica process trains there on purpose
    (`distrib.strategies.local_replicas.replica_process`); its weights must agree."""
    if strategy.num_replicas_in_sync == 1 and replica_process.current() is not None:
        replica_process.check_same_weights(module, "model.fit()")
        return unreplicated_steps()
    return contextlib.nullcontext()


def hint_if_alone_on_a_busy_machine(strategy: "Strategy") -> None:
    """`distrib.config.threading.warn_if_oversubscribed` for a lone process (not a replica, not a worker)."""
    from distrib.config.threading import warn_if_oversubscribed

    if (strategy.num_replicas_in_sync == 1 and replica_process.current() is None
            and _distributed_world_size() == 1):
        warn_if_oversubscribed()


def _distributed_world_size() -> int:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1
