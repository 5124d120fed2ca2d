"""`ReplicaState`: what an elastic snapshot of `fit` holds that differs between replicas.

Weights and optimizer state are the same on every replica; random generators
and metric accumulators are not. A replacement must continue with the lost
replica's own generators and partial metric sums (not the chief's, and not a
total), or its dropout masks and the epoch's logged metrics would differ from
a run that never failed. `state_dict` therefore keeps the weights once and
gathers every replica's generators and metric states (one all-gather, a few
kilobytes); `load_state_dict` takes this replica's.

Example (3 replicas; replica 1 was lost and is replaced):
    >>> state = ReplicaState(model, strategy).state_dict()   # on every replica (collective)
    >>> sorted(state), len(state["replicas"])
    (['module', 'optimizer', 'replicas'], 3)
    >>> ReplicaState(model, strategy).load_state_dict(state) # replica 1 takes blob 1: its RNG, metric sums
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Union

import torch

from distrib.checkpoint.files.format import dumps_state, loads_state
from distrib.checkpoint.rng import apply_rng_state, capture_rng_state
from distrib.checkpoint.strategy_lookup import resolve_role
from distrib.checkpoint.trackable import RoleAware
from distrib.strategies.checkpoint_role import CheckpointRole

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["ReplicaState"]


class ReplicaState(RoleAware):
    """A `Checkpoint` trackable: a model's weights once, plus every replica's RNG and metric states.

    Args:
        model: a compiled `distrib.Model` (anything with ``state_dict(aggregate_metrics=...)``
            and ``load_state_dict`` in that format).
        strategy: its strategy (the collective gathers over its replicas).
    """

    def __init__(self, model: Any, strategy: "Union[Strategy, CheckpointRole, None]") -> None:
        self._model = model
        self._strategy = strategy

    def state_dict(self, *, role: Optional[CheckpointRole] = None) -> Dict[str, Any]:
        """``{"module", "optimizer", "replicas": [uint8 blob per replica]}`` (collective).

        Args:
            role: the role a `Checkpoint` operation resolved at its entry; None: this object's own.
        """
        role = role if role is not None else resolve_role(self._strategy, "ReplicaState")
        state = self._model.state_dict(aggregate_metrics=False)
        own = dumps_state({"rng": capture_rng_state(), "metrics": state["metrics"]})
        blob = torch.frombuffer(bytearray(own), dtype=torch.uint8)
        blobs = [blob] if not role.multi_replica else role.collective.all_gather(blob.to(role.comm_device))
        return {"module": state["module"], "optimizer": state["optimizer"],
                "replicas": [b.cpu().clone() for b in blobs]}

    def load_state_dict(self, state: Dict[str, Any], *, role: Optional[CheckpointRole] = None) -> None:
        """Restore the weights and this replica's own generators and metric sums (``role``: as for
        `state_dict`)."""
        role = role if role is not None else resolve_role(self._strategy, "ReplicaState")
        blobs = state["replicas"]
        if len(blobs) == role.num_replicas_in_sync:
            mine = loads_state(bytes(blobs[role.replica_id].numpy().tobytes()),
                               name=f"replica {role.replica_id}'s state in a survivor's snapshot")
            self._model.load_state_dict({"module": state["module"], "optimizer": state["optimizer"],
                                         "metrics": mine["metrics"], "metrics_aggregated": False})
            apply_rng_state(mine["rng"])
            return
        # The job grew since the snapshot (elastic): this replica joins it. It had no share of the
        # epoch's metric sums (they stay with the others: zeros here). It takes the chief's generators:
        # in a program that seeds every replica alike they advance alike (global-batch dropout draws
        # one key per call on every replica), so they are the ones this replica would hold by now.
        first = loads_state(bytes(blobs[0].numpy().tobytes()), name="replica 0's state in a survivor's snapshot")
        self._model.load_state_dict({"module": state["module"], "optimizer": state["optimizer"],
                                     "metrics": first["metrics"], "metrics_aggregated": True})
        apply_rng_state(first["rng"])
