"""`Model.predict`: every prediction, in input order, on every worker.

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

from typing import TYPE_CHECKING, Any, List, Optional

import torch

from distrib.training.callback_setup import make_callback_list, resolve_verbose
from distrib.training.data_adapter import make_handler
from distrib.training.loss_tracker import default_log_every
from distrib.training.steps import unpack
from distrib.utils.nest import flatten, map_structure

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy
    from distrib.training.model import Model

__all__ = ["run_predict", "interleave"]


def run_predict(model: "Model", *, x: Any, batch_size: Optional[int], verbose: Any, steps: Optional[int],
                callbacks: Any) -> Any:
    """Implementation of `Model.predict`."""
    model._check_scope("predict")
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise ValueError(f"predict(steps=...) must be a positive int or None, got {steps!r}")
    strategy = model.distribute_strategy
    with strategy.scope():
        handler = make_handler(model, x, None, sample_weight=None, batch_size=batch_size, shuffle=False,
                               class_weight=None, purpose="predict")
        n_steps = steps if steps is not None else handler.steps_per_pass
        log_every = model.log_every or default_log_every(n_steps)
        cbs = make_callback_list(model, callbacks, verbose=resolve_verbose(verbose, strategy),
                                 add_history=False, epochs=1, steps=n_steps, log_every=log_every)
        was_training = model.module.training
        model.module.eval()
        outputs: List[Any] = []
        sizes: List[int] = []
        cbs.on_predict_begin()
        try:
            iterator = handler.make_iterator()
            step = 0
            while steps is None or step < steps:
                try:
                    batch, _ = next(iterator)
                except StopIteration:
                    break
                cbs.on_predict_batch_begin(step)
                x_part, _, _ = unpack(batch)
                parts = strategy._own_results(strategy.run(model.predict_step, (x_part,)))
                y_pred = parts[0] if len(parts) == 1 else _concat(list(parts))  # replicas of this process
                outputs.append(y_pred)
                sizes.append(_rows(y_pred))
                step += 1
                last = steps is not None and step == steps
                cbs.on_predict_batch_end(step - 1, {"outputs": y_pred} if (step % log_every == 0 or last) else None)
        finally:
            model.module.train(was_training)
        result = _assemble(strategy, outputs, sizes)
        cbs.on_predict_end()
    return result


def _rows(y_pred: Any) -> int:
    leaves = [t for t in flatten(y_pred) if isinstance(t, torch.Tensor)]
    if not leaves:
        raise ValueError("predict: the module returned no tensors")
    return int(leaves[0].shape[0]) if leaves[0].dim() else 1


def _assemble(strategy: "Strategy", outputs: List[Any], sizes: List[int]) -> Any:
    if not outputs:
        raise ValueError("predict: the input produced no batches; check that x is not empty")
    local = _concat(outputs)
    if strategy.collective.world_size > 1:  # one all-gather across processes
        all_sizes = strategy.collective.all_gather_json(sizes)
        gathered = strategy.gather(local, axis=0)
        local = map_structure(lambda t: interleave(t, all_sizes), gathered)
    return map_structure(_to_numpy, local)


def _concat(outputs: List[Any]) -> Any:
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        return torch.cat([o if o.dim() else o.reshape(1) for o in outputs], 0)
    if isinstance(first, dict):
        return type(first)((k, _concat([o[k] for o in outputs])) for k in first)
    if isinstance(first, (list, tuple)):
        parts = [_concat([o[i] for o in outputs]) for i in range(len(first))]
        return type(first)(*parts) if hasattr(first, "_fields") else type(first)(parts)
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
