"""`predict`'s output: every prediction, in input order, on every worker.

Each replica predicts its contiguous part of each global batch. At the end
one all-gather collects every replica's predictions (sizes may differ: the
last batch of a dataset whose size does not divide by the number of workers
is split unevenly), and the parts are put back in input order::

    global batch 0 = [replica 0 rows | replica 1 rows], global batch 1 = [...], ...

so the result equals what one process computes on the same batches.

Example (2 workers, 5 examples, batch_size=4: batches [0..3] and [4]):
    replica 0 predicts rows 0, 1 and 4; replica 1 rows 2, 3 and none;
    every worker returns rows 0, 1, 2, 3, 4.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List

import torch

from distrib.utils.nest import flatten, is_namedtuple, map_structure

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["rows_of", "assemble", "concat", "interleave"]


def rows_of(y_pred: Any) -> int:
    """Rows (examples) in one step's predictions; a scalar one is one row (why the rules of the rows of
    a batch differ: `distrib.training.execution.data_adapter.count_rows`)."""
    leaves = [t for t in flatten(y_pred) if isinstance(t, torch.Tensor)]
    if not leaves:
        raise ValueError("predict: the module returned no tensors")
    return int(leaves[0].shape[0]) if leaves[0].dim() else 1


def assemble(strategy: "Strategy", outputs: List[Any], sizes: List[int]) -> Any:
    """This process's per-step predictions, gathered from every process and put in input order, as numpy."""
    if not outputs:
        raise ValueError("predict: the input produced no batches; check that x is not empty")
    local = concat(outputs)
    if strategy.collective.distributed:  # one all-gather across processes
        all_sizes = strategy.collective.all_gather_json(sizes)
        gathered = strategy.gather(local, axis=0)
        local = map_structure(lambda t: interleave(t, all_sizes), gathered)
    return map_structure(_to_numpy, local)


def concat(outputs: List[Any]) -> Any:
    """Concatenate per-step predictions (tensors, or tuples/dicts of tensors) along rows."""
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        return torch.cat([o if o.dim() else o.reshape(1) for o in outputs], 0)
    if isinstance(first, dict):
        return type(first)((k, concat([o[k] for o in outputs])) for k in first)
    if isinstance(first, (list, tuple)):
        parts = [concat([o[i] for o in outputs]) for i in range(len(first))]
        return type(first)(*parts) if is_namedtuple(first) else type(first)(parts)
    raise TypeError(f"predict: the module returned a {type(first).__name__}; return tensors "
                    "(or tuples/dicts of tensors)")


def interleave(gathered: torch.Tensor, sizes_per_replica: List[List[int]]) -> torch.Tensor:
    """Reorder replica-major rows (all of replica 0, then replica 1, ...) into batch-major order.

    ``sizes_per_replica[r][s]`` is how many rows replica ``r`` produced at step ``s``.

    Example:
        >>> interleave(torch.tensor([0, 1, 4, 2, 3]), [[2, 1], [2, 0]])
        tensor([0, 1, 2, 3, 4])
    """
    blocks = []
    offset = 0
    per_replica = []
    for sizes in sizes_per_replica:
        parts = []
        for s in sizes:
            parts.append(gathered[offset:offset + s])
            offset += s
        per_replica.append(parts)
    num_steps = max(len(s) for s in sizes_per_replica)
    for step in range(num_steps):
        for parts in per_replica:
            if step < len(parts):
                blocks.append(parts[step])
    return torch.cat(blocks, 0) if blocks else gathered[:0]


def _to_numpy(t: Any) -> Any:
    if not isinstance(t, torch.Tensor):
        return t
    t = t.detach().cpu()
    if t.dtype in (torch.bfloat16,):
        t = t.to(torch.float32)
    return t.numpy()
