"""Checking a saved optimizer state against the optimizer it is restored into.

``torch.optim.Optimizer.load_state_dict`` checks the number of parameters but
not the shapes of their state: a forged or mismatched checkpoint whose
``exp_avg`` has the wrong shape restores silently and fails later, inside
``optimizer.step()``. `check_optimizer_state` refuses it at restore time,
naming the parameter and the state entry.

Example:
    >>> check_optimizer_state(adam, {"state": {0: {"exp_avg": torch.zeros(3)}}, "param_groups": [...]})
    ValueError: optimizer state 'exp_avg' of parameter 0 has shape (3,), the parameter has shape (2, 2)
"""
from __future__ import annotations

from itertools import chain
from typing import Any

import torch

__all__ = ["check_optimizer_state"]

#: Optimizers whose per-parameter state is legitimately not parameter-shaped (factored moments).
_FACTORED = ("Adafactor",)


def check_optimizer_state(optimizer: torch.optim.Optimizer, state: Any) -> None:
    """Raise ValueError unless ``state`` is an optimizer state dict that fits ``optimizer``'s parameters."""
    if not isinstance(state, dict) or not isinstance(state.get("state"), dict) \
            or not isinstance(state.get("param_groups"), list) \
            or not all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in state["param_groups"]):
        raise ValueError("not an optimizer state (needs 'state' and 'param_groups' with 'params' lists)")
    saved_ids = list(chain.from_iterable(g["params"] for g in state["param_groups"]))
    params = list(chain.from_iterable(g["params"] for g in optimizer.param_groups))
    if len(saved_ids) != len(params) or len(state["param_groups"]) != len(optimizer.param_groups):
        raise ValueError(f"optimizer state for {len(saved_ids)} parameters in {len(state['param_groups'])} groups, "
                         f"the optimizer has {len(params)} in {len(optimizer.param_groups)}")
    if type(optimizer).__name__ in _FACTORED:
        return
    for saved_id, param in zip(saved_ids, params):
        entries = state["state"].get(saved_id)
        if entries is None:
            continue
        if not isinstance(entries, dict):
            raise ValueError(f"optimizer state of parameter {saved_id} is a {type(entries).__name__}, not a dict")
        for name, value in entries.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                raise ValueError(f"optimizer state {name!r} of parameter {saved_id} has shape {tuple(value.shape)}, "
                                 f"the parameter has shape {tuple(param.shape)}")
