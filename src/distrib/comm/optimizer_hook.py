"""One global optimizer step pre-hook that completes gradient sync before any step.

Whatever optimizer steps a parameter tracked by a multi-replica strategy —
created inside the scope or not, a torch optimizer or a distrib one — its
gradients are summed across replicas first. The hook finds the strategies
involved from the optimizer's parameters (cached per optimizer).
"""
from __future__ import annotations

import threading
import weakref
from typing import Dict, List, Tuple

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

__all__ = ["register_parameters", "synchronize_gradients"]

_lock = threading.Lock()
_owner: Dict[int, Tuple["weakref.ref", "weakref.ref"]] = {}  # id(param) -> (param, synchronizer)
_version = 0
_cache: "weakref.WeakKeyDictionary[torch.optim.Optimizer, Tuple[int, List[weakref.ref]]]" = weakref.WeakKeyDictionary()
_handle = None


def register_parameters(synchronizer, params) -> None:
    """Route optimizer steps over ``params`` through ``synchronizer.finish()``."""
    global _version, _handle
    with _lock:
        for p in params:
            _owner[id(p)] = (weakref.ref(p), weakref.ref(synchronizer))
        _version += 1
        if _handle is None:
            _handle = register_optimizer_step_pre_hook(_before_step)


def _synchronizers_for(optimizer: torch.optim.Optimizer) -> List:
    cached = _cache.get(optimizer)
    if cached is not None and cached[0] == _version:
        return [s for s in (r() for r in cached[1]) if s is not None]
    found: Dict[int, weakref.ref] = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            entry = _owner.get(id(p))
            if entry is not None and entry[0]() is p:
                found.setdefault(id(entry[1]()), entry[1])
    _cache[optimizer] = (_version, list(found.values()))
    return [s for s in (r() for r in found.values()) if s is not None]


def synchronize_gradients(optimizer: torch.optim.Optimizer) -> None:
    """Complete the gradient sum of ``optimizer``'s parameters now (a collective; idempotent per step).

    For code that must look at the summed gradients before deciding whether
    to step (loss scaling's overflow check), so every replica decides alike.
    """
    for sync in _synchronizers_for(optimizer):
        sync.finish()


def _before_step(optimizer, args, kwargs) -> None:
    synchronize_gradients(optimizer)
