"""Cross-replica reduce and gather, shared by every strategy.

A value is first folded over the replicas this process holds (a `PerReplica`
under CentralStorageStrategy, else the one local value), then combined over
the job's processes through the collective (the identity on one process).

Example (2 replicas holding [1, 2] and [3]):
    reduce_values(collective, cpu, 2, SUM, v, axis=0) -> 6
    reduce_values(collective, cpu, 2, MEAN, v, axis=0) -> 2.0
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from distrib.comm.collective import Collective, ReduceOp
from distrib.strategies.per_replica import PerReplica, combine_local
from distrib.utils.nest import map_structure

__all__ = ["reduce_values", "gather_values", "as_reduce_op"]


def reduce_values(collective: Collective, comm_device: torch.device, num_replicas: int,
                  reduce_op: Any, value: Any, axis: Optional[int]) -> Any:
    """``strategy.reduce``: combine a (structure of) per-replica value(s) across all replicas.

    ``axis=None`` combines replica values element-wise. With an ``axis``,
    each replica's value is first summed along it, so MEAN is the mean over
    *all* elements of all replicas along that axis (uneven sizes weigh right).
    """
    op = as_reduce_op(reduce_op)
    return map_structure(lambda v: _reduce_one(collective, comm_device, num_replicas, op, v, axis),
                         _unwrap_structure(value))


def _reduce_one(collective: Collective, comm_device: torch.device, n: int, op: ReduceOp,
                value: Any, axis: Optional[int]) -> Any:
    t = torch.as_tensor(combine_local(value, op.value, axis))
    if not t.is_floating_point() and op is ReduceOp.MEAN:
        t = t.to(torch.float32)
    t = t.detach().to(comm_device)
    if axis is None:
        if op is ReduceOp.MEAN:
            return collective.all_reduce(t.clone(), ReduceOp.SUM) / n
        return collective.all_reduce(t.clone(), op)
    if op in (ReduceOp.SUM, ReduceOp.MEAN):
        packed = torch.cat([t.sum(dim=axis).reshape(-1).to(torch.float64),
                            torch.tensor([t.shape[axis]], dtype=torch.float64, device=t.device)])
        packed = collective.all_reduce(packed, ReduceOp.SUM)
        total = packed[:-1].reshape(t.sum(dim=axis).shape).to(t.dtype if op is ReduceOp.SUM else torch.float32)
        return total if op is ReduceOp.SUM else total / packed[-1].to(torch.float32)
    local = t.amax(dim=axis) if op is ReduceOp.MAX else t.amin(dim=axis)
    return collective.all_reduce(local.clone(), op)


def gather_values(collective: Collective, comm_device: torch.device, value: Any, axis: int = 0) -> Any:
    """``strategy.gather``: every replica's value concatenated along ``axis`` in replica order."""
    def one(v: Any) -> torch.Tensor:
        t = torch.as_tensor(combine_local(v, "SUM", axis)).detach().to(comm_device)
        if t.dim() == 0:
            t = t.reshape(1)
        moved = t.movedim(axis, 0).contiguous()
        parts = collective.all_gather(moved)
        return torch.cat(parts, 0).movedim(0, axis)
    return map_structure(one, _unwrap_structure(value))


def _unwrap_structure(value: Any) -> Any:
    """A `PerReplica` of structures becomes a structure of `PerReplica` leaves."""
    if not isinstance(value, PerReplica) or not value.values:
        return value
    first = value.values[0]
    if isinstance(first, dict):
        return {k: _unwrap_structure(PerReplica(tuple(v[k] for v in value.values))) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(_unwrap_structure(PerReplica(tuple(v[i] for v in value.values)))
                           for i in range(len(first)))
    return value


def as_reduce_op(op: Any) -> ReduceOp:
    """``ReduceOp.SUM`` or its name (``"sum"``); anything else is an error naming the value."""
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str) and op.upper() in ReduceOp.__members__:
        return ReduceOp[op.upper()]
    raise ValueError(f"reduce_op must be distrib.ReduceOp.SUM or MEAN (or MAX/MIN), got {op!r}")
