"""`experimental_local_results`: one value per local replica of this task.

In tf.distribute one worker holds all its local replicas' values. distrib
runs one process per replica, so a task with D local replicas gathers them:
every local replica calls `LocalResults.gather` (every replica runs the same
program, as TF's single cross-replica call does once per worker) and each
receives the same D-tuple, in local replica order. The gather uses a
torch.distributed group per task, created once, on first use, by every
replica of the job (``new_group`` is collective over the whole job). With one
local replica nothing is exchanged.

Tensors may differ in shape between replicas (a partial last batch) but not
in rank or dtype; other leaves must be JSON-able (numbers, strings, None).

Example (MirroredStrategy(["cpu:0", "cpu:1"]), replica 0 holds [0, 10], replica 1 holds [20, 30]):
    >>> strategy.experimental_local_results(strategy.run(lambda x: x * 10, (x,)))
    (tensor([0, 10]), tensor([20, 30]))     # on both replicas
"""
from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any, List, Sequence, Tuple

import numpy as np
import torch

from distrib.comm.errors import DistribCommError, first_line
from distrib.data.distribution.input_context import InputPlacement
from distrib.utils.nest import flatten, map_structure

__all__ = ["LocalResults"]

_MAX_DIMS = 8


class LocalResults:
    """Gathers a structure from every local replica of this task."""

    def __init__(self, placement: InputPlacement, timeout_seconds: float) -> None:
        self._placement = placement
        self._timeout = timeout_seconds
        self._group: Any = None
        self._lock = threading.Lock()

    def _task_group(self) -> Any:
        import torch.distributed as dist

        with self._lock:
            if self._group is None:
                p = self._placement
                timeout = timedelta(seconds=self._timeout)
                mine = None
                for task in range(p.num_input_pipelines):  # every replica creates every group, in order
                    first = task * p.num_local_replicas
                    ranks = list(range(first, first + p.num_local_replicas))
                    group = dist.new_group(ranks, backend="gloo", timeout=timeout)
                    if task == p.input_pipeline_id:
                        mine = group
                self._group = mine
            return self._group

    def gather(self, value: Any) -> Tuple[Any, ...]:
        """One ``value`` structure per local replica, this replica's own at its local index."""
        count = self._placement.num_local_replicas
        if count == 1:
            return (value,)
        try:
            group = self._task_group()
            gathered: List[List[Any]] = [_gather_leaf(leaf, group, count) for leaf in flatten(value)]
        except (TypeError, ValueError):
            raise
        except Exception as exc:
            p = self._placement
            raise DistribCommError(
                f"experimental_local_results: local replica {p.local_replica_id} of task "
                f"{p.input_pipeline_id} could not gather from the task's other "
                f"{count - 1} local replica(s) (replicas {list(p.local_ranks)}), which must all call it "
                f"at the same point: {first_line(exc)}") from None
        out = []
        for replica in range(count):
            it = iter([g[replica] for g in gathered])
            out.append(map_structure(lambda _: next(it), value))
        return tuple(out)


def _gather_leaf(leaf: Any, group: Any, count: int) -> List[Any]:
    if isinstance(leaf, torch.Tensor):
        return _gather_tensor(leaf, group, count)
    if isinstance(leaf, np.ndarray) and leaf.dtype.kind == "U":  # a batch of strings (distrib.data)
        rows = _gather_leaf({"strings": leaf.tolist(), "shape": list(leaf.shape)}, group, count)
        return [np.asarray(r["strings"], dtype=str).reshape(r["shape"]) for r in rows]
    if isinstance(leaf, np.str_):
        leaf = str(leaf)
    try:
        data = json.dumps(leaf).encode()
    except (TypeError, ValueError):
        raise TypeError(f"experimental_local_results: a replica value of type {type(leaf).__name__} "
                        f"cannot be gathered from the other local replicas: return tensors, numbers "
                        f"or strings from the replica function") from None
    parts = _gather_tensor(torch.frombuffer(bytearray(data), dtype=torch.uint8), group, count)
    return [json.loads(bytes(p.tolist()).decode()) for p in parts]


def _gather_tensor(tensor: torch.Tensor, group: Any, count: int) -> List[torch.Tensor]:
    import torch.distributed as dist

    t = tensor.detach()
    if t.dim() > _MAX_DIMS:
        raise ValueError(f"experimental_local_results: a {t.dim()}-dimensional tensor; at most "
                         f"{_MAX_DIMS} dimensions can be gathered from local replicas")
    flat = t.reshape(-1).cpu()
    is_bool = flat.dtype == torch.bool
    if is_bool:  # gloo has no bool reductions or gathers
        flat = flat.to(torch.uint8)
    header = torch.full((_MAX_DIMS + 1,), -1, dtype=torch.int64)
    header[0] = t.dim()
    header[1:1 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
    headers = [torch.empty_like(header) for _ in range(count)]
    dist.all_gather(headers, header, group=group)
    shapes = [_shape(h) for h in headers]
    longest = max(_numel(s) for s in shapes)
    padded = torch.zeros(longest, dtype=flat.dtype)
    padded[:flat.numel()] = flat
    parts = [torch.empty_like(padded) for _ in range(count)]
    dist.all_gather(parts, padded, group=group)
    out = []
    for part, shape in zip(parts, shapes):
        value = part[:_numel(shape)].reshape(shape)
        out.append((value.to(torch.bool) if is_bool else value).to(tensor.device))
    return out


def _shape(header: torch.Tensor) -> Sequence[int]:
    dims = int(header[0])
    return [int(v) for v in header[1:1 + dims]]


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for v in shape:
        n *= v
    return n

