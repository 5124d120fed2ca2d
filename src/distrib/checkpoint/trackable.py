"""What a `Checkpoint` takes besides tensors: the torch ``state_dict`` protocol.

`Trackable` is any object with ``state_dict()`` and ``load_state_dict(state)``
(modules, optimizers, `distrib.Model`, a user's class); `RestoresVerbatim` is
one that also names the live tensors ``load_state_dict`` sets unchanged, so a
restore can read the saved values straight into them; `RoleAware` is one of
distrib's own (a `Checkpoint`, `RNGState`, `ReplicaState`) that takes the
`CheckpointRole` its caller resolved instead of looking it up again.

Example:
    >>> isinstance(torch.nn.Linear(2, 1), Trackable), isinstance(3, Trackable)
    (True, False)
"""
from __future__ import annotations

from typing import Any, Iterable, Protocol, runtime_checkable

import torch

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


@runtime_checkable
class RoleAware(Protocol):
    """An object whose state depends on who writes: it takes the caller's `CheckpointRole`."""

    def state_dict_for(self, role: Any) -> Any: ...

    def load_state_dict_for(self, state: Any, role: Any) -> Any: ...
