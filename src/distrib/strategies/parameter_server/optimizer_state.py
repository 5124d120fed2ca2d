"""Optimizer state (slots) of a parameter-server job, seen through the chief's optimizer.

The state an optimizer keeps per variable (SGD momentum buffers, Adam's
moments and ``step``, ...) lives on the ps tasks, next to the shards it
updates. So that checkpoints hold it, the chief's optimizer gets two hooks
when it is first shipped to the ps tasks:

* ``optimizer.state_dict()`` reads the state from the ps tasks and puts it
  in torch's layout (``state[index]`` in parameter order; per-row slots of a
  partitioned variable are concatenated back along the first axis);
* ``optimizer.load_state_dict(sd)`` sends the loaded state to the ps tasks
  (cut into the shards again) and leaves the chief's own state empty.

Example (momentum SGD, after some scheduled steps):
    >>> sd = optimizer.state_dict()
    >>> sorted(sd["state"][0])                 # read from the ps holding parameter 0
    ['momentum_buffer']
    >>> optimizer.load_state_dict(sd)          # written back to the ps tasks
"""
from __future__ import annotations

from typing import Any, Dict, List

import torch

from distrib.cluster.task import TaskInfo
from distrib.strategies.parameter_server import server as ps_server
from distrib.strategies.parameter_server.variables import VariableInfo

__all__ = ["OptimizerStateSync"]


def _per_row(value: Any, info: VariableInfo) -> bool:
    """Whether a slot has one row per row of the variable (so it is split like the variable)."""
    return (len(info.shards) > 1 and isinstance(value, torch.Tensor) and value.dim() > 0
            and tuple(value.shape) == tuple(info.shape))


class OptimizerStateSync:
    """Connects the chief's optimizer ``key`` to its parts on the ps tasks.

    Args:
        runtime: the chief's channel runtime.
        registry: the chief's `VariableRegistry`.
        key: the optimizer's key (the same on the ps tasks).
        optimizer: the chief's optimizer (its parameters are variables).
    """

    def __init__(self, runtime: Any, registry: Any, key: int, optimizer: torch.optim.Optimizer) -> None:
        self._runtime, self._registry, self._key = runtime, registry, key
        self._handles = [optimizer.register_state_dict_post_hook(self._fill),
                         optimizer.register_load_state_dict_post_hook(self._push)]

    def _params(self, optimizer: torch.optim.Optimizer) -> List[torch.Tensor]:
        return [p for group in optimizer.param_groups for p in group["params"]]

    def _ps_ids(self, optimizer: torch.optim.Optimizer) -> List[int]:
        return sorted({s.ps for p in self._params(optimizer) for s in self._registry.info(p).shards})

    def _fill(self, optimizer: torch.optim.Optimizer, state_dict: Dict[str, Any]) -> Dict[str, Any]:
        futures = {ps: self._runtime.call_async(TaskInfo("ps", ps), ps_server.read_optimizer_state, (self._key,))
                   for ps in self._ps_ids(optimizer)}
        got: Dict[Any, Dict[str, Any]] = {}
        for ps, future in futures.items():
            got.update({tuple(k): v for k, v in self._runtime.wait(TaskInfo("ps", ps), future).items()})
        state: Dict[int, Dict[str, Any]] = {}
        for index, p in enumerate(self._params(optimizer)):
            info = self._registry.info(p)
            parts = [got[s.key] for s in info.shards if s.key in got]
            if len(parts) != len(info.shards):
                continue  # never stepped (or only some shards): no state yet
            merged = {}
            for name, first in parts[0].items():
                if isinstance(first, torch.Tensor) and len(parts) > 1 and first.dim() > 0 and \
                        sum(int(part[name].shape[0]) for part in parts) == info.shape[0]:
                    merged[name] = torch.cat([part[name] for part in parts], 0)
                else:
                    merged[name] = first
            state[index] = merged
        state_dict["state"] = state
        return state_dict

    def _push(self, optimizer: torch.optim.Optimizer) -> None:
        per_ps: Dict[int, Dict[Any, Dict[str, Any]]] = {}
        for p in self._params(optimizer):
            slots = optimizer.state.get(p)
            if not slots:
                continue
            info = self._registry.info(p)
            for shard in info.shards:
                per_ps.setdefault(shard.ps, {})[shard.key] = {
                    name: (v.detach()[shard.start:shard.stop].clone() if _per_row(v, info) else v)
                    for name, v in slots.items()}
        futures = {ps: self._runtime.call_async(TaskInfo("ps", ps), ps_server.write_optimizer_state,
                                                (self._key, states))
                   for ps, states in per_ps.items()}
        for ps, future in futures.items():
            self._runtime.wait(TaskInfo("ps", ps), future)
        optimizer.state.clear()
