"""What a `Checkpoint` takes besides tensors: the torch ``state_dict`` protocol.

`Trackable` is any object with ``state_dict()`` and ``load_state_dict(state)``
(modules, optimizers, `distrib.Model`, a user's class); `RestoresVerbatim` is
one that also names the live tensors ``load_state_dict`` sets unchanged, so a
restore can read the saved values straight into them; `RoleAware` is one of
distrib's own (a `Checkpoint`, `RNGState`, `ReplicaState`) whose ``state_dict``
and ``load_state_dict`` take the `CheckpointRole` its caller resolved, as the
keyword ``role=``, instead of looking it up again.

Example:
    >>> isinstance(torch.nn.Linear(2, 1), Trackable), isinstance(3, Trackable)
    (True, False)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Optional, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.checkpoint_role import CheckpointRole

__all__ = ["Trackable", "RestoresVerbatim", "RoleAware"]


@runtime_checkable
class Trackable(Protocol):
    """An object a `Checkpoint` saves by ``state_dict()`` and restores by ``load_state_dict``."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> Any: ...


@runtime_checkable
class RestoresVerbatim(Protocol):
    """An object that names the tensors its ``load_state_dict`` sets to the saved values unchanged."""

    def tensors_restored_verbatim(self) -> Iterable[torch.Tensor]: ...


class RoleAware:
    """An object whose state depends on who writes: its state methods take the caller's `CheckpointRole`.

    A base class, not a ``Protocol``: every `Trackable` has methods of these
    names, so only subclassing says they take ``role=``. ``role=None``: the
    object resolves its own.
    """

    def state_dict(self, *, role: "Optional[CheckpointRole]" = None) -> Any:
        """The object's state, under ``role`` (None: the object's own, looked up now)."""
        raise NotImplementedError

    def load_state_dict(self, state: Any, *, role: "Optional[CheckpointRole]" = None) -> Any:
        """Restore ``state`` under ``role`` (None: the object's own, looked up now)."""
        raise NotImplementedError
