"""Which strategy a checkpoint operation belongs to, even outside ``strategy.scope()``.

TensorFlow's multi-worker tutorials create ``Checkpoint``/``CheckpointManager`` and call
``save()`` outside any scope, yet under a multi-worker job the save must still know who
the chief is. The lookup order is:

1. the innermost open ``strategy.scope()``;
2. the strategy whose scope was open when the `Checkpoint`/`CheckpointManager`
   was created;
3. the process's job strategy, if `distrib.strategies.context` records one
   (``job_strategy()``: the multi-replica strategy this process joined);
4. the default strategy -- but never silently in a multi-process job: if
   ``torch.distributed`` runs more than one process, that is an error, since
   every worker would write the chief's files.

Example:
    >>> with strategy.scope():
    ...     ckpt = distrib.train.Checkpoint(model=model)   # remembers `strategy`
    >>> ckpt.save("/ckpts/ckpt")                           # outside the scope: still `strategy`
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

from distrib.strategies.checkpoint_role import CheckpointRole
from distrib.strategies import context, default

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["scope_strategy", "resolve_strategy", "resolve_role", "known_role", "ChiefUnknownError"]


class ChiefUnknownError(RuntimeError):
    """A checkpoint operation in a multi-process job found no strategy, so nobody knows who the chief is."""


def scope_strategy() -> "Optional[Strategy]":
    """The strategy of the innermost open scope, or None (what objects capture at creation)."""
    return context.current_scope_strategy()


def resolve_strategy(captured: "Optional[Strategy]" = None, what: str = "checkpoint") -> "Strategy":
    """The strategy for a checkpoint operation (see the module docstring for the order)."""
    current = context.current_scope_strategy()
    if current is not None:
        return current
    if captured is not None:
        return captured
    found = context.job_strategy()
    if found is not None:
        return found
    strategy = default.get_strategy()
    processes = _torch_world_size()
    if processes > 1 and strategy.num_replicas_in_sync <= 1:
        raise ChiefUnknownError(
            f"{what}: called outside strategy.scope() in a job of {processes} processes, so the chief is unknown; "
            "create the Checkpoint/CheckpointManager (or call this) inside `with strategy.scope():`")
    return strategy


def resolve_role(given: "Union[Strategy, CheckpointRole, None]" = None,
                 what: str = "checkpoint") -> CheckpointRole:
    """The `CheckpointRole` for an operation: ``given`` itself, its strategy's, or the resolved strategy's."""
    if isinstance(given, CheckpointRole):
        return given
    return resolve_strategy(given, what).checkpoint_role()


def known_role(given: "Union[Strategy, CheckpointRole, None]" = None,
               what: str = "checkpoint") -> Optional[CheckpointRole]:
    """`resolve_role`, or None where it would raise `ChiefUnknownError`.

    For operations that need the role only for some of their objects (a
    restore: only an `RNGState` or `ReplicaState` gathers): they resolve it
    once at their entry and pass it down, and None lets each such object
    resolve (and raise) for itself, as it would with no role given.
    """
    try:
        return resolve_role(given, what)
    except ChiefUnknownError:
        return None


def _torch_world_size() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1
