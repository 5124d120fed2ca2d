"""Variables on parameter servers: placement, reading and writing, as the chief sees them.

Every parameter registered while ``strategy.scope()`` is open on the chief becomes a *variable*: split
into shards when the scope closes (one, unless a ``variable_partitioner``), placed on the ps tasks
round-robin. Until the first function is scheduled the chief's tensors are the values (writes after the
scope are sent when training starts: `send_first_values`); from then on the ps tasks hold them, and the
chief's tensor is a cache refreshed before ``forward``/``state_dict`` (``load_state_dict`` writes through).

Example (2 ps tasks, no partitioner):
    >>> with strategy.scope():
    ...     model = torch.nn.Linear(3, 1)
    >>> [strategy.variable_placement(p) for p in model.parameters()]
    [('/job:ps/replica:0/task:0/device:CPU:0',), ('/job:ps/replica:0/task:1/device:CPU:0',)]
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from distrib import hooks
from distrib.cluster.task import TaskInfo
from distrib.strategies.parameter_server import server as ps_server
from distrib.strategies.parameter_server.server import ShardKey

__all__ = ["Shard", "VariableInfo", "VariableRegistry", "read_values", "device_name"]


@dataclass(frozen=True)
class Shard:
    """Rows ``start:stop`` (first axis) of a variable, held by ps task ``ps`` under ``key``."""

    ps: int
    key: ShardKey
    start: int
    stop: int


@dataclass(frozen=True)
class VariableInfo:
    """A placed parameter: identity, shape and where its shards live (picklable, small)."""

    var_id: int
    shape: Tuple[int, ...]
    dtype: torch.dtype
    requires_grad: bool
    shards: Tuple[Shard, ...]
    name: str = ""


def device_name(ps: int) -> str:
    """TensorFlow's device string for ps task ``ps``."""
    return f"/job:ps/replica:0/task:{ps}/device:CPU:0"


def read_values(runtime: Any, infos: Sequence[VariableInfo]) -> List[torch.Tensor]:
    """The current values of ``infos`` from the ps tasks: one call per ps, in parallel."""
    by_ps: Dict[int, List[ShardKey]] = {}
    for info in infos:
        for shard in info.shards:
            by_ps.setdefault(shard.ps, []).append(shard.key)
    futures = {ps: runtime.call_async(TaskInfo("ps", ps), ps_server.read_variables, (keys,))
               for ps, keys in by_ps.items()}
    got: Dict[ShardKey, torch.Tensor] = {}
    for ps, future in futures.items():
        got.update(zip(by_ps[ps], runtime.wait(TaskInfo("ps", ps), future)))
    out = []
    for info in infos:
        parts = [got[s.key] for s in info.shards]
        out.append(parts[0] if len(parts) == 1 else torch.cat(parts, 0))
    return out


def split_rows(info: VariableInfo, value: torch.Tensor) -> List[torch.Tensor]:
    """``value`` cut into the variable's shards (contiguous copies, safe to send)."""
    if len(info.shards) == 1:
        return [value.detach().contiguous()]
    return [value.detach()[s.start:s.stop].clone() for s in info.shards]


class VariableRegistry:
    """The chief's table of variables (parameters created in the strategy's scope).

    Args:
        runtime: the channel runtime (`distrib.strategies.parameter_server.runtime.Runtime`).
        ps_ids: the ps task ids, in round-robin order.
        partitioner: ``partitioner(shape, dtype) -> [shards, 1, ...]`` or None.
        captures_here: whether a parameter registered now belongs to this strategy's scope.
    """

    def __init__(self, runtime: Any, ps_ids: Sequence[int], partitioner: Optional[Callable],
                 captures_here: Callable[[], bool]) -> None:
        self._runtime = runtime
        self._ps_ids = list(ps_ids)
        self._partitioner = partitioner
        self._captures_here = captures_here
        self._lock = threading.RLock()
        self._pending: List[Tuple["weakref.ref[torch.nn.Module]", str]] = []
        self._hooks: list = []
        self._by_param: Dict[int, VariableInfo] = {}
        self._params: Dict[int, torch.nn.Parameter] = {}  # var_id -> the chief's parameter (kept alive)
        self._hooked: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
        self._next_ps = 0
        self.generation = 0
        self._fresh: Dict[int, int] = {}
        self._unstarted: List[int] = []  # placed, no function scheduled since: the chief's values count

    # ------------------------------------------------------------ capture
    def start_capture(self) -> None:
        self._hooks.append(hooks.module_registration_hook("parameter", self._on_parameter))

    def stop_capture(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def _on_parameter(self, module: torch.nn.Module, name: str, param: Any) -> None:
        if param is not None and self._captures_here():
            with self._lock:
                self._pending.append((weakref.ref(module), name))

    def adopt(self, module: torch.nn.Module) -> None:
        """Capture every parameter of a module built outside the scope (``track_module``)."""
        with self._lock:
            for mod in module.modules():
                self._pending.extend((weakref.ref(mod), n) for n, p in mod._parameters.items()
                                     if p is not None)

    # ----------------------------------------------------------- placement
    def place_pending(self, defer_lazy: bool = False) -> None:
        """Create the captured parameters on the ps tasks (idempotent).

        Args:
            defer_lazy: keep parameters of lazy modules that are not yet
                initialized pending (placed by a later call once the module
                ran), instead of raising.
        """
        with self._lock:
            if not defer_lazy:
                _refuse_uninitialized(self._pending)
            pending, self._pending = self._pending, []
            new: List[Tuple[torch.nn.Parameter, VariableInfo]] = []
            for ref, name in pending:
                module = ref()
                param = None if module is None else module._parameters.get(name)
                if param is None or id(param) in self._by_param:
                    continue
                if isinstance(param, torch.nn.parameter.UninitializedParameter):
                    self._pending.append((ref, name))
                    continue
                info = self._new_info(param, f"{type(module).__name__}.{name}")
                self._by_param[id(param)] = info
                self._params[info.var_id] = param
                self._fresh[info.var_id] = self.generation
                self._unstarted.append(info.var_id)
                new.append((param, info))
                self._hook_module(module)
            self._send(new, ps_server.create_variables)

    def send_first_values(self) -> None:
        """Training starts: write the chief's values of the variables placed since the last call.

        Nothing has changed them on the ps tasks before a function runs, so the
        chief's tensors (with the program's writes after placement) are the values.
        """
        with self._lock:
            unstarted, self._unstarted = self._unstarted, []
            items = [(self._params[v], self._by_param[id(self._params[v])]) for v in unstarted]
            if items:
                self._send(items, ps_server.write_variables)

    def _new_info(self, param: torch.nn.Parameter, name: str) -> VariableInfo:
        shape = tuple(param.shape)
        counts = self._partitioner(shape, param.dtype) if self._partitioner and shape else [1]
        if any(int(c) != 1 for c in list(counts)[1:]):
            raise ValueError(f"variable_partitioner returned {list(counts)} for {name} of shape {shape}: "
                             f"only the first axis can be partitioned")
        rows = [len(t) for t in torch.arange(shape[0]).tensor_split(int(counts[0]))] if shape else [0]
        var_id = len(self._params)
        shards, start = [], 0
        for index, n in enumerate(rows):
            ps = self._ps_ids[self._next_ps % len(self._ps_ids)]
            self._next_ps += 1
            shards.append(Shard(ps, (var_id, index), start, start + n))
            start += n
        return VariableInfo(var_id, shape, param.dtype, bool(param.requires_grad), tuple(shards), name)

    def _send(self, items: Sequence[Tuple[torch.nn.Parameter, VariableInfo]], handler: Callable) -> None:
        by_ps: Dict[int, Tuple[List[ShardKey], List[torch.Tensor]]] = {}
        for param, info in items:
            for shard, value in zip(info.shards, split_rows(info, param.detach())):
                keys, values = by_ps.setdefault(shard.ps, ([], []))
                keys.append(shard.key)
                values.append(value)
        futures = {ps: self._runtime.call_async(TaskInfo("ps", ps), handler, kv) for ps, kv in by_ps.items()}
        for ps, future in futures.items():
            self._runtime.wait(TaskInfo("ps", ps), future)

    # ------------------------------------------------------------ queries
    def info(self, param: Any) -> Optional[VariableInfo]:
        """The variable behind ``param``, or None if it was not created in the scope."""
        return self._by_param.get(id(param)) if isinstance(param, torch.Tensor) else None

    def read(self, params: Sequence[torch.nn.Parameter]) -> List[torch.Tensor]:
        """Current values from the ps tasks (errors name the ps)."""
        infos = [self._require(p) for p in params]
        return read_values(self._runtime, infos)

    def write(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Overwrite the variables with the chief's values of ``params`` (after loading a checkpoint)."""
        items = [(p, self._require(p)) for p in params]
        self._send(items, ps_server.write_variables)

    def _require(self, param: Any) -> VariableInfo:
        info = self.info(param)
        if info is None:
            raise ValueError("ParameterServerStrategy: this tensor is not a variable: create the module "
                             "inside strategy.scope() (or pass it to strategy.track_module)")
        return info

    # ---------------------------------------------------- chief cache hooks
    def _hook_module(self, module: torch.nn.Module) -> None:
        if module in self._hooked:
            return
        self._hooked.add(module)
        module.register_forward_pre_hook(_ChiefHook(self.refresh))
        module.register_state_dict_pre_hook(_ChiefHook(self.refresh))
        module.register_load_state_dict_post_hook(_ChiefHook(self._write_own))

    def refresh(self, module: torch.nn.Module) -> None:
        """Copy the current values of ``module``'s variables into the chief's tensors, if stale."""
        stale = [p for p in module.parameters()
                 if (i := self.info(p)) is not None and self._fresh.get(i.var_id) != self.generation]
        if not stale:
            return
        generation = self.generation
        with torch.no_grad():
            for p, value in zip(stale, self.read(stale)):
                p.data = value.to(p.dtype)
                self._fresh[self._by_param[id(p)].var_id] = generation

    def _write_own(self, module: torch.nn.Module) -> None:
        own = [p for p in module._parameters.values() if p is not None and self.info(p) is not None]
        if own:
            self.write(own)

    def bump(self) -> None:
        """Training changed the variables: the chief's cached values are stale."""
        self.generation += 1


def _refuse_uninitialized(pending: Sequence[Tuple["weakref.ref[torch.nn.Module]", str]]) -> None:
    for ref, name in pending:
        module = ref()
        if module is not None and isinstance(module._parameters.get(name), torch.nn.parameter.UninitializedParameter):
            raise ValueError(
                f"ParameterServerStrategy: {type(module).__name__}.{name} is not initialized "
                f"(a lazy module): give its input size, or run it once inside "
                f"strategy.scope(), before scheduling functions (Model.fit does that itself)")


def _no_op(*args: Any) -> None:
    return None


class _ChiefHook:
    """A module hook that keeps the chief's cache in step; on a worker (unpickled) it does nothing."""

    def __init__(self, action: Callable[[torch.nn.Module], None]) -> None:
        self._action = action

    def __call__(self, module: torch.nn.Module, *args: Any) -> None:
        self._action(module)

    def __reduce__(self) -> Tuple[Any, ...]:
        return _no_op_hook, ()


def _no_op_hook() -> Callable[..., None]:
    return _no_op
