"""Shipping scheduled functions to workers: what travels by value, what by reference.

``coordinator.schedule(step_fn, args)`` pickles ``(step_fn, args, kwargs)``
with cloudpickle, so functions and classes of the user's script travel by
value, together with the globals they use (TensorFlow traces the function
instead; the effect for the user is the same). Objects that must not be
copied on every call are replaced by *references* (pickle persistent ids):

* the strategy -> the worker's own strategy object;
* a variable (a parameter created in scope) -> ``("param", VariableInfo)``;
  the worker keeps one local tensor per variable and fills it with the
  current value from the ps tasks before each function runs;
* a module that has variables, an optimizer over variables, a metric created
  in scope, and per-worker values -> ``("obj", key)``: their *definition* is
  pickled once, sent to a worker the first time a function there needs it,
  and kept there (so a per-worker iterator keeps its position).

Example:
    >>> exporter = Exporter(strategy, registry, on_new_optimizer=register_on_ps)
    >>> payload, keys = exporter.export_closure(step_fn, (per_worker_iterator,), {})
    >>> [exporter.definitions[k].kind for k in keys]        # what a fresh worker must install first
    ['module', 'optimizer', 'per_worker', 'per_worker']
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import pickle
import sys
import sysconfig
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import cloudpickle
import torch

from distrib.strategies.parameter_server.variables import VariableInfo

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["Definition", "Exporter", "Importer", "hyper_parameters"]

log = logging.getLogger("distrib.ps")

_PLAIN = (int, float, str, bytes, bool, type(None), tuple, list, dict)
_LIBRARY_DIRS = tuple(os.path.realpath(p) for p in {sysconfig.get_paths()["stdlib"],
                                                    sysconfig.get_paths()["purelib"],
                                                    sysconfig.get_paths()["platlib"]})


@dataclass(frozen=True)
class Definition:
    """How a worker builds a shared object: ``kind`` in module/metric/optimizer/per_worker."""

    kind: str
    payload: bytes
    deps: Tuple[int, ...]


def hyper_parameters(optimizer: torch.optim.Optimizer) -> Dict[int, Dict[str, Any]]:
    """The plain (number, bool, tuple) hyper-parameters of each param group, by group index."""
    out: Dict[int, Dict[str, Any]] = {}
    for index, group in enumerate(optimizer.param_groups):
        out[index] = {k: v for k, v in group.items() if k != "params" and _plain_value(v)}
    return out


def _plain_value(v: Any) -> bool:
    if isinstance(v, tuple):
        return all(_plain_value(x) for x in v)
    return v is None or isinstance(v, (bool, int, float, str))


class _Pickler(cloudpickle.Pickler):
    def __init__(self, file: io.BytesIO, pid: Callable[[Any], Optional[tuple]]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._pid = pid

    def persistent_id(self, obj: Any) -> Optional[tuple]:  # noqa: D401 - pickle hook
        if type(obj) in _PLAIN:
            return None
        return self._pid(obj)


class Exporter:
    """Chief side: pickles functions, assigns keys to shared objects and keeps their definitions.

    Args:
        strategy: the chief's strategy (becomes the worker's strategy).
        registry: the `VariableRegistry` (which tensors are variables).
        classify: ``classify(obj) -> kind or None`` for objects other than modules/optimizers.
        on_new_optimizer: called with ``(key, optimizer)`` when an optimizer is first shipped.
    """

    def __init__(self, strategy: "Strategy", registry: Any, classify: Callable[[Any], Optional[str]],
                 on_new_optimizer: Callable[[int, torch.optim.Optimizer], None]) -> None:
        self._strategy = strategy
        self._registry = registry
        self._classify_extra = classify
        self._on_new_optimizer = on_new_optimizer
        self._keys: Dict[int, int] = {}
        self.objects: Dict[int, Any] = {}
        self.definitions: Dict[int, Definition] = {}
        self._warned = False

    def export_closure(self, fn: Callable, args: tuple, kwargs: dict) -> Tuple[bytes, List[int]]:
        """``(payload, keys)``: the pickled call and every shared object it needs, dependencies first."""
        with _by_value(fn):
            payload, refs = self._dumps((fn, args, kwargs), root=None)
        return payload, self.closure_of(refs)

    def export_value(self, value: Any) -> Tuple[bytes, Set[int]]:
        """Pickle any value with the same references (used for per-worker recipes)."""
        with _by_value(value if callable(value) else None):
            return self._dumps(value, root=None)

    def closure_of(self, refs: Set[int]) -> List[int]:
        order: List[int] = []
        seen: Set[int] = set()

        def visit(key: int) -> None:
            if key in seen:
                return
            seen.add(key)
            for dep in self.definitions[key].deps:
                visit(dep)
            order.append(key)

        for key in sorted(refs):
            visit(key)
        return order

    # ------------------------------------------------------------ pickling
    def _dumps(self, obj: Any, root: Any) -> Tuple[bytes, Set[int]]:
        refs: Set[int] = set()
        buffer = io.BytesIO()
        _Pickler(buffer, lambda o: self._persistent_id(o, root, refs)).dump(obj)
        return buffer.getvalue(), refs

    def _persistent_id(self, obj: Any, root: Any, refs: Set[int]) -> Optional[tuple]:
        if obj is root:
            return None
        if obj is self._strategy:
            return ("strategy",)
        if isinstance(obj, torch.Tensor):
            info = self._registry.info(obj)
            if info is not None:
                return ("param", info)
            if isinstance(obj, torch.nn.Parameter) and not self._warned:
                self._warned = True
                log.warning("distrib: a scheduled function uses a parameter %s that was not created in "
                            "strategy.scope(): each worker gets a copy and its updates are lost",
                            tuple(obj.shape))
            return None
        key = self._keys.get(id(obj))
        if key is None:
            kind = self._classify(obj)
            if kind is None:
                return None
            key = self._define(obj, kind)
        refs.add(key)
        return ("obj", key)

    def _classify(self, obj: Any) -> Optional[str]:
        if isinstance(obj, torch.nn.Module):
            return "module" if any(self._registry.info(p) for p in obj.parameters()) else None
        if isinstance(obj, torch.optim.Optimizer):
            params = [p for g in obj.param_groups for p in g["params"]]
            placed = [self._registry.info(p) is not None for p in params]
            if any(placed) and not all(placed):
                raise ValueError(f"{type(obj).__name__} optimizer: {placed.count(False)} of its {len(params)} "
                                 f"parameters were not created in strategy.scope(); create the whole model "
                                 f"in the scope so that every parameter lives on the ps tasks")
            return "optimizer" if params and all(placed) else None
        return self._classify_extra(obj)

    def _define(self, obj: Any, kind: str) -> int:
        key = len(self.objects)
        self._keys[id(obj)] = key
        self.objects[key] = obj
        try:
            if kind == "optimizer":
                spec = {"groups": [{"hyper": hyper, "params": [self._registry.info(p) for p in group["params"]]}
                                   for (_, hyper), group in zip(sorted(hyper_parameters(obj).items()),
                                                                obj.param_groups)],
                        "name": type(obj).__name__}
                self._on_new_optimizer(key, obj)
                self.definitions[key] = Definition(kind, cloudpickle.dumps(spec), ())
            elif kind == "per_worker":
                payload, refs = self.export_value(obj.recipe)
                self.definitions[key] = Definition(kind, payload, tuple(sorted(refs)))
            else:
                payload, refs = self._dumps(obj, root=obj)
                self.definitions[key] = Definition(kind, payload, tuple(sorted(refs)))
        except BaseException:
            del self._keys[id(obj)], self.objects[key]
            raise
        return key


@contextlib.contextmanager
def _by_value(obj: Any) -> Iterator[None]:
    """Pickle the user module that defines ``obj`` by value (workers may not have run it)."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    file = os.path.realpath(getattr(module, "__file__", None) or "")
    user_code = (module is not None and module.__name__ != "__main__" and file
                 and not file.startswith(_LIBRARY_DIRS)
                 and not module.__name__.split(".")[0] in ("distrib", "torch", "numpy"))
    if not user_code:
        yield
        return
    cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        cloudpickle.unregister_pickle_by_value(module)


class Importer:
    """Worker side: resolves references while unpickling and keeps the installed objects.

    Args:
        strategy: the worker's strategy object.
        make_optimizer: ``make_optimizer(key, spec, params_of) -> optimizer`` for optimizer definitions.
        make_per_worker: ``make_per_worker(recipe) -> value`` for per-worker definitions.
    """

    def __init__(self, strategy: "Strategy", make_optimizer: Callable, make_per_worker: Callable) -> None:
        self._strategy = strategy
        self._make_optimizer = make_optimizer
        self._make_per_worker = make_per_worker
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
            spec = pickle.loads(payload)
            obj = self._make_optimizer(key, spec, self.param)
            var_ids = {info.var_id for group in spec["groups"] for info in group["params"]}
            keys: Set[int] = set()
        else:
            value, var_ids, keys = self.loads(payload)
            obj = self._make_per_worker(value) if kind == "per_worker" else value
        for dep in set(deps) - keys:
            var_ids |= self.vars_of.get(dep, set())
            keys |= self.keys_of.get(dep, set())
        self.objects[key], self.kinds[key] = obj, kind
        self.vars_of[key], self.keys_of[key] = var_ids, keys | {key}

    def loads(self, payload: bytes) -> Tuple[Any, Set[int], Set[int]]:
        """Unpickle ``payload``: ``(value, variables used, shared objects used)``."""
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

        unpickler = pickle.Unpickler(io.BytesIO(payload))
        unpickler.persistent_load = load
        value = unpickler.load()
        for key in list(keys):
            var_ids |= self.vars_of[key]
            keys |= self.keys_of[key]
        return value, var_ids, keys
