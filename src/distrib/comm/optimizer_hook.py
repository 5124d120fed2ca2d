"""One global optimizer step pre-hook that completes gradient sync before any step.

Whatever optimizer steps a parameter tracked by a multi-replica strategy —
created inside the scope or not, a torch optimizer or a distrib one — its
gradients are summed across replicas first. The hook finds the strategies
involved from the optimizer's parameters (cached per optimizer).

It also catches the silent mistake of a replicated job: an optimizer
stepping a parameter with a gradient that no strategy syncs (its module was
created outside ``strategy.scope()``), which would let the replicas drift
apart. That step raises `UnsyncedParameterError`, naming the module and the fix.
Parameters captured by a one-replica strategy's scope (a `OneDeviceStrategy`
in a worker of a multi-worker job) are registered as meant to train alone
(`register_unreplicated`), as TensorFlow trains them in each worker.
"""
from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from typing import Dict, Iterator, List, Tuple

import torch

from distrib import hooks
from distrib.errors import DistribError

__all__ = ["register_parameters", "register_unreplicated", "install", "synchronize_gradients",
           "UnsyncedParameterError", "unreplicated_steps"]

_lock = threading.Lock()
_owner: Dict[int, Tuple["weakref.ref", "weakref.ref"]] = {}  # id(param) -> (param, synchronizer)
_version = 0
#: optimizer -> (version, synchronizers, parameters no synchronizer owns)
_cache: "weakref.WeakKeyDictionary[torch.optim.Optimizer, tuple]" = weakref.WeakKeyDictionary()
_handle = None
_replicated_job = None  # weakref to a multi-replica strategy whose modules must be synced
_unreplicated = threading.local()  # .active: this thread trains an unreplicated model on purpose


class UnsyncedParameterError(DistribError, RuntimeError):
    """An optimizer stepped a parameter that no multi-replica strategy keeps in sync."""


def install(strategy=None) -> None:
    """Register the global hook; with ``strategy`` (multi-replica, tracking modules), check every step."""
    global _handle, _replicated_job, _version
    with _lock:
        if strategy is not None:
            _replicated_job = weakref.ref(strategy)
            _version += 1
        if _handle is None:
            _handle = hooks.optimizer_step_pre_hook(_before_step)


def register_parameters(synchronizer, params) -> None:
    """Route optimizer steps over ``params`` through ``synchronizer.finish()``."""
    global _version
    with _lock:
        for p in params:
            _owner[id(p)] = (weakref.ref(p), weakref.ref(synchronizer))
        _version += 1
    install()


class _Alone:
    """The synchronizer of parameters that train alone in this process: nothing to sum."""

    def finish(self) -> None:
        pass


_ALONE = _Alone()


def register_unreplicated(params) -> None:
    """Steps over ``params`` are meant to train alone (a one-replica strategy's scope made them).

    Only needed (and only done) once a replicated job checks every step: a
    plain single process gets no global hook from this.
    """
    if _replicated_job is not None:
        register_parameters(_ALONE, params)


def _lookup(optimizer: torch.optim.Optimizer) -> Tuple[List, List[torch.Tensor]]:
    cached = _cache.get(optimizer)
    if cached is None or cached[0] != _version:
        found: Dict[int, weakref.ref] = {}
        unsynced: List[weakref.ref] = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                entry = _owner.get(id(p))
                if entry is not None and entry[0]() is p:
                    found.setdefault(id(entry[1]()), entry[1])
                else:
                    unsynced.append(weakref.ref(p))
        cached = (_version, list(found.values()), unsynced)
        _cache[optimizer] = cached
    syncs = [s for s in (r() for r in cached[1]) if s is not None]
    return syncs, [p for p in (r() for r in cached[2]) if p is not None]


def synchronize_gradients(optimizer: torch.optim.Optimizer) -> None:
    """Complete the gradient sum of ``optimizer``'s parameters now (a collective; idempotent per step).

    For code that must look at the summed gradients before deciding whether
    to step (loss scaling's overflow check), so every replica decides alike.
    """
    for sync in _lookup(optimizer)[0]:
        sync.finish()


@contextlib.contextmanager
def unreplicated_steps() -> Iterator[None]:
    """Inside: steps of unsynced parameters are intended (the same training runs in every replica process)."""
    previous = getattr(_unreplicated, "active", False)
    _unreplicated.active = True
    try:
        yield
    finally:
        _unreplicated.active = previous


def _before_step(optimizer, args, kwargs) -> None:
    syncs, unsynced = _lookup(optimizer)
    for sync in syncs:
        sync.finish()
    if unsynced and _replicated_job is not None and not getattr(_unreplicated, "active", False):
        job = _replicated_job()
        stepped = [p for p in unsynced if p.grad is not None]
        if job is not None and stepped:
            raise UnsyncedParameterError(_describe(stepped[0], job, len(stepped)))


def _describe(param: torch.Tensor, strategy, count: int) -> str:
    owner = _owning_module(param)
    where = "a tensor of no module" if owner is None else f"{owner[0]}.{owner[1]}"
    return (f"optimizer.step() would update {count} parameter(s) that {type(strategy).__name__} does not keep in "
            f"sync across its {strategy.num_replicas_in_sync} replicas, first {where} of shape "
            f"{tuple(param.shape)}: the replicas would drift apart. Create the module inside "
            "`with strategy.scope():`, or adopt it with `strategy.track_module(module)` before training")


def _owning_module(param: torch.Tensor):
    """``(module summary, attribute name)`` of the module registering ``param`` (error path only)."""
    for holder in gc.get_referrers(param):
        if not isinstance(holder, dict):
            continue
        for attrs in gc.get_referrers(holder):  # the module's __dict__ holds its _parameters
            if not isinstance(attrs, dict) or attrs.get("_parameters") is not holder:
                continue
            for module in gc.get_referrers(attrs):
                if isinstance(module, torch.nn.Module) and module.__dict__ is attrs:
                    name = next((k for k, v in holder.items() if v is param), "?")
                    return repr(module).splitlines()[0], name
    return None
