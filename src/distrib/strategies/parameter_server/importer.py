"""Installing what the chief ships on a worker: definitions once, scheduled calls each time.

The worker's side of `distrib.strategies.parameter_server.exporter`: an
`Importer` resolves the references a payload carries (the strategy, variables
by `VariableInfo`, shared objects by key) while loading it, builds each shared
object from its definition once and keeps it (a per-worker iterator keeps its
position), and, with ``registered_only=True`` (``DISTRIB_PS_FUNCTIONS=registered``),
refuses every pickle: only messages of the closed encoding are read, every
field checked.

Example:
    >>> importer = Importer(strategy, make_optimizer, make_per_worker)
    >>> importer.install(key, "module", payload, deps=())     # the chief's definition, once
    >>> (fn, args, kwargs), var_ids, keys = importer.loads_call(call_payload)
"""
from __future__ import annotations

import contextlib
import io
import pickle
from typing import TYPE_CHECKING, Any, Callable, Dict, Set, Tuple

import torch

from distrib.strategies.parameter_server import server as ps_server, wire as ps_wire
from distrib.strategies.parameter_server.registered import (MODE_VARIABLE, RegisteredOnlyError, bind_parameters,
                                                            info_from_wire, registered_function)
from distrib.strategies.parameter_server.variables import VariableInfo

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["Importer"]


class Importer:
    """Worker side: resolves references while loading and keeps the installed objects.

    Args:
        strategy: the worker's strategy object.
        make_optimizer: ``make_optimizer(key, spec, params_of) -> optimizer`` for optimizer definitions.
        make_per_worker: ``make_per_worker(recipe) -> value`` for per-worker definitions.
        registered_only: refuse every pickle (``DISTRIB_PS_FUNCTIONS=registered``); messages of the
            closed encoding are accepted either way.
    """

    def __init__(self, strategy: "Strategy", make_optimizer: Callable, make_per_worker: Callable,
                 registered_only: bool = False) -> None:
        self._strategy = strategy
        self._make_optimizer = make_optimizer
        self._make_per_worker = make_per_worker
        self.registered_only = registered_only
        self.objects: Dict[int, Any] = {}
        self.kinds: Dict[int, str] = {}
        self.vars_of: Dict[int, Set[int]] = {}
        self.keys_of: Dict[int, Set[int]] = {}
        self.params: Dict[int, torch.nn.Parameter] = {}
        self.infos: Dict[int, VariableInfo] = {}

    def param(self, info: VariableInfo) -> torch.nn.Parameter:
        """The worker's local tensor for a variable (created empty; filled before each function)."""
        p = self.params.get(info.var_id)
        if p is None:
            p = torch.nn.Parameter(torch.empty(info.shape, dtype=info.dtype), requires_grad=info.requires_grad)
            self.params[info.var_id] = p
            self.infos[info.var_id] = info
        return p

    def install(self, key: int, kind: str, payload: bytes, deps: Tuple[int, ...]) -> None:
        """Build a shared object from its definition, once (later definitions of ``key`` are ignored)."""
        if key in self.objects:
            return
        if kind == "optimizer":
            spec = self._optimizer_spec(payload)
            obj = self._make_optimizer(key, spec, self.param)
            var_ids = {info.var_id for group in spec["groups"] for info in group["params"]}
            keys: Set[int] = set()
        else:
            value, var_ids, keys = self.loads(payload)
            with self.scope_for(payload):
                if ps_wire.is_message(payload):
                    value = self._follow(kind, value)
                obj = self._make_per_worker(value) if kind == "per_worker" else value
        for dep in set(deps) - keys:
            var_ids |= self.vars_of.get(dep, set())
            keys |= self.keys_of.get(dep, set())
        self.objects[key], self.kinds[key] = obj, kind
        self.vars_of[key], self.keys_of[key] = var_ids, keys | {key}

    def scope_for(self, payload: bytes) -> Any:
        """The worker's strategy scope for running what a closed ``payload`` names, else no scope.

        A registered function cannot read the script's ``strategy`` variable on
        a worker (the worker never left the strategy's constructor, so it is
        not set there): ``distrib.get_strategy()`` gives it instead.
        """
        return self._strategy.scope() if ps_wire.is_message(payload) else contextlib.nullcontext()

    def loads_call(self, payload: bytes) -> Tuple[Tuple[Callable, tuple, dict], Set[int], Set[int]]:
        """A scheduled call ``(fn, args, kwargs)``, its variables and shared objects (`loads`), checked."""
        value, var_ids, keys = self.loads(payload)
        ok = isinstance(value, tuple) and len(value) == 3 and callable(value[0])
        if not (ok and isinstance(value[1], tuple) and isinstance(value[2], dict)
                and all(isinstance(k, str) for k in value[2])):
            raise ps_wire.WireFormatError("parameter-server message: not a scheduled call")
        return value, var_ids, keys

    def loads(self, payload: bytes) -> Tuple[Any, Set[int], Set[int]]:
        """Load ``payload``: ``(value, variables used, shared objects used)``."""
        var_ids: Set[int] = set()
        keys: Set[int] = set()

        def load(pid: tuple) -> Any:
            if pid[0] == "strategy":
                return self._strategy
            if pid[0] == "param":
                var_ids.add(pid[1].var_id)
                return self.param(pid[1])
            keys.add(pid[1])
            return self.objects[pid[1]]

        def resolve(answer: Any) -> Any:
            kind = answer[0] if isinstance(answer, tuple) and answer else None
            if answer == ("strategy",):
                return self._strategy
            if kind == "param" and len(answer) == 2:
                info = info_from_wire(answer[1])
                var_ids.add(info.var_id)
                return self.param(info)
            if kind == "obj" and len(answer) == 2 and type(answer[1]) is int and answer[1] in self.objects:
                keys.add(answer[1])
                return self.objects[answer[1]]
            if kind == "fn" and len(answer) == 2:
                return registered_function(answer[1])
            raise ps_wire.WireFormatError(f"parameter-server message: an unknown reference {str(answer)[:80]}")

        if ps_wire.is_message(payload):
            value = ps_wire.decode(payload, resolve=resolve)
        else:
            self._refuse_pickle()
            unpickler = pickle.Unpickler(io.BytesIO(payload))
            unpickler.persistent_load = load
            value = unpickler.load()
        for key in list(keys):
            var_ids |= self.vars_of[key]
            keys |= self.keys_of[key]
        return value, var_ids, keys

    # ------------------------------------------------------------ closed forms
    def _refuse_pickle(self) -> None:
        if self.registered_only:
            raise RegisteredOnlyError(f"this worker runs registered functions only ({MODE_VARIABLE}=registered) "
                                      f"and refused a pickled one: set {MODE_VARIABLE}=registered on the "
                                      f"chief too")

    def _optimizer_spec(self, payload: bytes) -> Dict[str, Any]:
        if not ps_wire.is_message(payload):
            self._refuse_pickle()
            return pickle.loads(payload)
        spec = ps_wire.decode(payload)
        try:
            groups = [{"hyper": dict(g["hyper"]), "params": [info_from_wire(i) for i in g["params"]]}
                      for g in spec["groups"]]
            if not all(isinstance(k, str) for g in groups for k in g["hyper"]):
                raise TypeError
            return {"groups": groups, "name": str(spec["name"])}
        except (TypeError, KeyError, ValueError):
            raise ps_wire.WireFormatError("parameter-server message: a malformed optimizer definition") from None

    def _follow(self, kind: str, value: Any) -> Any:
        """The object a closed definition describes, built with this worker's own code."""
        head = value[0] if isinstance(value, tuple) and value else None
        if kind == "per_worker":
            if head in ("call", "iter", "values", "value") and len(value) == 2:
                return value
        elif kind == "module" and head == "module" and len(value) == 6:
            _, name, args, kwargs, params, buffers = value
            if isinstance(args, tuple) and isinstance(kwargs, dict) and all(isinstance(k, str) for k in kwargs) \
                    and isinstance(params, list) and isinstance(buffers, list) \
                    and all(isinstance(p, tuple) and len(p) == 2 for p in params + buffers):
                module = registered_function(name)(*args, **kwargs)
                return bind_parameters(module, params, buffers, f"the registered function {name!r}")
        elif kind == "metric" and head == "metric" and len(value) == 3 and isinstance(value[2], dict):
            from distrib.strategies.interface import StrategyBoundState

            if "dtype" in value[2]:
                ps_wire.dtype_named(value[2]["dtype"])
            cls = ps_server.named_class(value[1], StrategyBoundState)
            metric = cls.from_config(value[2])
            metric.distribute_strategy = self._strategy
            return metric
        raise ps_wire.WireFormatError(f"parameter-server message: a malformed {kind} definition")
