"""`RNGState`: the random number generator states of every replica, as a trackable.

Captures torch's CPU generator (and CUDA's, when CUDA is in use), numpy's
global ``np.random`` state and Python's ``random`` state. Under a
multi-worker strategy `state_dict` is collective: each replica's state is
serialised with the safe format and gathered (``strategy.collective.all_gather``),
so the chief's checkpoint holds all of them, and on restore each replica takes
its own. With a different number of replicas than at save time every replica
takes the chief's state (a warning says so once).

Example:
    >>> ckpt = distrib.train.Checkpoint(model=model, rng=RNGState())
    >>> path = ckpt.save("/ckpts/ckpt")
    >>> a = torch.rand(3)
    >>> ckpt.restore(path)
    >>> torch.equal(torch.rand(3), a)        # the same draws again
    True
"""
from __future__ import annotations

import random
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

import numpy as np
import torch

from distrib.checkpoint.files.format import dumps_state, loads_state
from distrib.checkpoint.files.storage import CheckpointWarning
from distrib.strategies.checkpoint_role import CheckpointRole
from distrib.checkpoint.strategy_lookup import resolve_role, scope_strategy
from distrib.checkpoint.trackable import RoleAware

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["RNGState", "capture_rng_state", "apply_rng_state"]


def capture_rng_state() -> Dict[str, Any]:
    """This process's generator states (CUDA's only if CUDA was already initialised)."""
    state: Dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        "cuda": None,
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def apply_rng_state(state: Dict[str, Any]) -> None:
    """Set this process's generators from a `capture_rng_state` result."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available():
        for i, s in enumerate(cuda[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(s, i)


class RNGState(RoleAware):
    """A `Checkpoint` trackable for the RNG states of all replicas.

    Args:
        strategy: the strategy (or its `CheckpointRole`) whose replicas to gather; default the open
            scope's at creation, else at use (see `distrib.checkpoint.strategy_lookup`).
    """

    def __init__(self, strategy: "Union[Strategy, CheckpointRole, None]" = None) -> None:
        self._strategy = strategy if strategy is not None else scope_strategy()
        self._warned = False

    def state_dict(self, *, role: Optional[CheckpointRole] = None) -> Dict[str, Any]:
        """``{"world_size": n, "replicas": [state of replica 0, ..., n-1]}`` (collective).

        Args:
            role: the role a `Checkpoint` operation resolved at its entry; None: this object's own.
        """
        role = role if role is not None else resolve_role(self._strategy, "RNGState")
        own = capture_rng_state()
        n = role.num_replicas_in_sync
        replicas: List[Dict[str, Any]] = _gather(role, own) if role.multi_replica else [own]
        return {"world_size": n, "replicas": replicas}

    def load_state_dict(self, state: Dict[str, Any], *, role: Optional[CheckpointRole] = None) -> None:
        """Apply this replica's saved state (the chief's if the world size changed; a warning unless
        every replica had saved the same state). ``role``: as for `state_dict`."""
        role = role if role is not None else resolve_role(self._strategy, "RNGState")
        n, rank = role.num_replicas_in_sync, role.replica_id
        replicas = state["replicas"]
        if int(state["world_size"]) == n and len(replicas) == n:
            mine: Optional[Dict[str, Any]] = replicas[rank]
        else:
            mine = replicas[0]
            if not self._warned and not _all_alike(replicas):
                self._warned = True
                warnings.warn(f"RNG states were saved by {state['world_size']} replicas and are restored on {n}; "
                              "every replica takes the chief's state, so random draws differ from the original run",
                              CheckpointWarning, stacklevel=3)
        apply_rng_state(mine)


def _all_alike(replicas: List[Dict[str, Any]]) -> bool:
    """Whether every replica saved the same generators (a program that seeds them alike): then the
    chief's state is each replica's, and taking it on another number of replicas changes nothing."""
    return all(_same(replicas[0], r) for r in replicas[1:])


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _gather(role: CheckpointRole, own: Dict[str, Any]) -> List[Dict[str, Any]]:
    data = dumps_state(own)
    local = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(role.comm_device)
    parts = role.collective.all_gather(local)
    return [loads_state(bytes(p.cpu().numpy().tobytes()), name=f"RNG state of replica {i}")
            for i, p in enumerate(parts)]
