"""What a ``ps`` task holds: variable shards and the optimizer that updates them.

Variables are stored by *shard key* ``(var_id, shard_index)``. The chief
creates them (`create_variables`), workers read them (`read_variables`)
and push gradients (`apply_gradients`), which the ps applies with its part
of the optimizer: for every optimizer created in the strategy's scope, each
ps builds an instance of the same class with the same hyper-parameters over
the shards it holds (`create_optimizer`). Element-wise optimizers (SGD,
momentum, Adam, RMSprop, Adagrad, ...) therefore update a parameter exactly
as one optimizer over the whole model would; updates from different workers
are applied one at a time, in arrival order (asynchronous training).

These functions are channel handlers: they run on the ps's gRPC server threads and share
one lock, so a read never sees a half-applied update. A ps task never
unpickles: the optimizer's class arrives by name (``"torch.optim.adam:Adam"``),
resolved among the modules this task has imported, and must be a
``torch.optim.Optimizer``.

Example (what a worker's step amounts to, on ps 0):
    >>> read_variables([(0, 0)])                     # [tensor([...])]
    >>> apply_gradients(7, [(0, 0)], [grad], {0: {"lr": 0.1}})
"""
from __future__ import annotations

import importlib
import sys
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

__all__ = ["create_variables", "write_variables", "read_variables", "create_optimizer",
           "apply_gradients", "inventory", "read_optimizer_state", "write_optimizer_state", "ShardKey",
           "class_name", "named_class"]

ShardKey = Tuple[int, int]

_LOCK = threading.Lock()
_VARIABLES: Dict[ShardKey, torch.Tensor] = {}
_OPTIMIZERS: Dict[int, "_OptimizerShard"] = {}
_UPDATES = [0]


class _OptimizerShard:
    """One optimizer's part on this ps: a torch optimizer over the local shards."""

    def __init__(self, cls: type, defaults: Dict[str, Any], groups: List[Dict[str, Any]]) -> None:
        self.group_of: Dict[ShardKey, int] = {}
        self.local_groups: Dict[int, int] = {}
        torch_groups = []
        for index, group in enumerate(groups):
            keys = [tuple(k) for k in group.pop("keys")]
            if not keys:
                continue
            self.local_groups[index] = len(torch_groups)
            for key in keys:
                self.group_of[key] = index
            torch_groups.append({**group, "params": [_VARIABLES[k] for k in keys]})
        self.optimizer: Optional[torch.optim.Optimizer] = None
        if torch_groups:
            try:
                self.optimizer = cls(torch_groups, **defaults)
            except TypeError:  # a constructor that does not take its defaults back as keywords
                self.optimizer = cls(torch_groups)

    def apply(self, keys: Sequence[ShardKey], grads: Sequence[torch.Tensor],
              hyper: Dict[int, Dict[str, Any]]) -> None:
        opt = self.optimizer
        if opt is None:
            return
        for index, values in hyper.items():
            local = self.local_groups.get(int(index))
            if local is not None:
                opt.param_groups[local].update(values)
        touched = []
        for key, grad in zip(keys, grads):
            var = _VARIABLES[tuple(key)]
            var.grad = grad.to(dtype=var.dtype)
            touched.append(var)
        try:
            opt.step()
        finally:
            for var in touched:
                var.grad = None


def create_variables(keys: Sequence[ShardKey], values: Sequence[torch.Tensor]) -> None:
    """Store the initial value of each shard (a variable the chief created in scope)."""
    with _LOCK:
        for key, value in zip(keys, values):
            _VARIABLES[tuple(key)] = value.detach().clone().requires_grad_(value.is_floating_point())


def write_variables(keys: Sequence[ShardKey], values: Sequence[torch.Tensor]) -> None:
    """Overwrite shards in place (the chief restored a checkpoint); optimizer state is kept."""
    with _LOCK, torch.no_grad():
        for key, value in zip(keys, values):
            _VARIABLES[tuple(key)].copy_(value)


def read_variables(keys: Sequence[ShardKey]) -> List[torch.Tensor]:
    """Consistent copies of the shards' current values."""
    with _LOCK:
        return [_VARIABLES[tuple(k)].detach().clone() for k in keys]


def class_name(cls: type) -> str:
    """``"module:qualname"`` of a class every task can name, or `TypeError` saying how to make it so."""
    module, qualname = cls.__module__, cls.__qualname__
    if "<locals>" in qualname:
        raise TypeError(f"the optimizer class {qualname} is defined inside a function, so the ps tasks "
                        f"cannot name it: define it at the top level of a module (or of the script, "
                        f"above ParameterServerStrategy())")
    return f"{module}:{qualname}"


def named_class(name: str, base: type) -> type:
    """The class called ``name`` (`class_name`), a subclass of ``base``, among this task's modules."""
    module_name, _, qualname = str(name).partition(":")
    module = sys.modules.get(module_name)
    if module is None and module_name.split(".")[0] in ("torch", "distrib"):
        module = importlib.import_module(module_name)
    value: Any = module
    for part in qualname.split("."):
        value = getattr(value, part, None)
    if not (isinstance(value, type) and issubclass(value, base)):
        raise TypeError(f"this ps task has no {base.__name__} class {name!r}: define it in a module the "
                        f"script imports (or in the script above ParameterServerStrategy()), so that "
                        f"every task has it")
    return value


def create_optimizer(opt_id: int, class_ref: str, defaults: Dict[str, Any], groups: List[Dict[str, Any]]) -> None:
    """Build this ps's part of optimizer ``opt_id``: class by name, hyper-parameters, shard keys per group."""
    cls = named_class(class_ref, torch.optim.Optimizer)
    with _LOCK:
        if opt_id not in _OPTIMIZERS:
            _OPTIMIZERS[opt_id] = _OptimizerShard(cls, dict(defaults), [dict(g) for g in groups])


def apply_gradients(opt_id: int, keys: Sequence[ShardKey], grads: Sequence[torch.Tensor],
                    hyper: Dict[int, Dict[str, Any]]) -> None:
    """Apply one worker's gradients for the given shards with optimizer ``opt_id``."""
    with _LOCK, torch.no_grad():
        _OPTIMIZERS[opt_id].apply(keys, grads, hyper)
        _UPDATES[0] += 1


def read_optimizer_state(opt_id: int) -> Dict[ShardKey, Dict[str, Any]]:
    """Copies of optimizer ``opt_id``'s state (slots such as momentum, ``step``) per shard held here."""
    with _LOCK:
        shard = _OPTIMIZERS.get(opt_id)
        if shard is None or shard.optimizer is None:
            return {}
        out: Dict[ShardKey, Dict[str, Any]] = {}
        for key, var in _VARIABLES.items():
            state = shard.optimizer.state.get(var)
            if key in shard.group_of and state:
                out[key] = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
        return out


def write_optimizer_state(opt_id: int, states: Dict[ShardKey, Dict[str, Any]]) -> None:
    """Replace optimizer ``opt_id``'s state of the given shards (the chief restored a checkpoint)."""
    with _LOCK:
        shard = _OPTIMIZERS.get(opt_id)
        if shard is None or shard.optimizer is None:
            raise KeyError(f"this ps has no part of optimizer {opt_id}")
        for key, state in states.items():
            key = tuple(key)
            if key not in shard.group_of:
                raise KeyError(f"optimizer {opt_id} does not update shard {key} on this ps")
            var = _VARIABLES[key]
            shard.optimizer.state[var] = {k: v.detach().clone().to(var.device) if isinstance(v, torch.Tensor) else v
                                          for k, v in state.items()}


def inventory() -> Dict[str, Any]:
    """What this ps holds: ``{"shards": {key: shape}, "updates": n}`` (for tests and debugging)."""
    with _LOCK:
        return {"shards": {k: tuple(v.shape) for k, v in _VARIABLES.items()}, "updates": _UPDATES[0]}
