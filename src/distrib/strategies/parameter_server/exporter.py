"""Shipping scheduled functions to workers (the chief's side): what travels by value, what by reference.

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

With ``closed=True`` (``DISTRIB_PS_FUNCTIONS=registered``) the same tables
hold messages of the closed encoding instead of pickles: functions by
registered name, modules by the registered call that built them
(`distrib.strategies.parameter_server.registered`). The worker's side is
`distrib.strategies.parameter_server.importer`.
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

from distrib.strategies.parameter_server import server as ps_server, wire as ps_wire
from distrib.strategies.parameter_server.registered import (MODE_VARIABLE, RegisteredOnlyError, describe,
                                                            info_to_wire, recipe_of, registered_name)
from distrib.utils.callables import module_file, where_defined

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["Definition", "Exporter", "hyper_parameters"]

log = logging.getLogger("distrib.ps")

_PLAIN = (int, float, str, bytes, bool, type(None), tuple, list, dict)
_CARRIED = ("tensors, numbers, strings, lists, tuples and dicts of them, and the modules, optimizers, metrics "
            "and per-worker values created in strategy.scope()")
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
        closed: send registered functions and recipes in the closed encoding, never a pickle.
    """

    def __init__(self, strategy: "Strategy", registry: Any, classify: Callable[[Any], Optional[str]],
                 on_new_optimizer: Callable[[int, torch.optim.Optimizer], None], closed: bool = False) -> None:
        self.closed = closed
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
        if self.closed:
            if registered_name(fn) is None:
                raise RegisteredOnlyError(f"{MODE_VARIABLE}=registered: the scheduled "
                                          f"{describe(fn)} is not registered: decorate it with "
                                          f"@distrib.coordinator.remote_function at the top level of the "
                                          f"script, above ParameterServerStrategy(), so workers have it")
            payload, refs = self._encode((fn, args, kwargs), root=None)
            return payload, self.closure_of(refs)
        with _by_value(fn):
            payload, refs = self._dumps((fn, args, kwargs), root=None)
        return payload, self.closure_of(refs)

    def export_value(self, value: Any) -> Tuple[bytes, Set[int]]:
        """Pickle any value with the same references (used for per-worker recipes)."""
        if self.closed:
            return self._encode(value, root=None)
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

    def _encode(self, obj: Any, root: Any) -> Tuple[bytes, Set[int]]:
        refs: Set[int] = set()
        try:
            payload = ps_wire.encode(obj, reference=lambda o: self._closed_reference(o, root, refs))
        except ps_wire.WireFormatError as exc:
            what = str(exc).split(": ", 1)[-1].split(":", 1)[0]
            raise RegisteredOnlyError(f"{MODE_VARIABLE}=registered: a scheduled function's arguments {what} "
                                      f"(they carry {_CARRIED})") from None
        return payload, refs

    def _closed_reference(self, obj: Any, root: Any, refs: Set[int]) -> Optional[tuple]:
        ref = self._persistent_id(obj, root, refs)
        if ref is not None:
            return ("param", info_to_wire(ref[1])) if ref[0] == "param" else ref
        if obj is root or isinstance(obj, torch.Tensor):
            return None
        if isinstance(obj, torch.nn.Module) and recipe_of(obj) is not None:  # built by a registered
            refs.add(self._define(obj, "module"))                           # function, without variables
            return ("obj", self._keys[id(obj)])
        if isinstance(obj, torch.nn.Module):
            raise RegisteredOnlyError(f"{MODE_VARIABLE}=registered: {describe(obj)} was not built by a "
                                      f"registered function, so workers cannot build it: build it in a "
                                      f"function decorated @distrib.coordinator.remote_function")
        if callable(obj) and not isinstance(obj, type):
            name = registered_name(obj)
            if name is None:
                raise RegisteredOnlyError(f"{MODE_VARIABLE}=registered: {describe(obj)} is not registered: "
                                          f"decorate it (or register it) with "
                                          f"@distrib.coordinator.remote_function so workers can name it")
            return ("fn", name)
        return None

    def _closed_definition(self, obj: Any, kind: str) -> Tuple[Any, ...]:
        if kind == "metric":
            return ("metric", ps_server.class_name(type(obj)), obj.get_config())
        recipe = recipe_of(obj)
        if recipe is None:
            raise RegisteredOnlyError(f"{MODE_VARIABLE}=registered: {describe(obj)} was not built by a "
                                      f"registered function, so workers cannot build it: build the model in "
                                      f"a function decorated @distrib.coordinator.remote_function")
        name, args, kwargs = recipe
        return ("module", name, tuple(args), dict(kwargs), list(obj.named_parameters(remove_duplicate=False)),
                list(obj.named_buffers(remove_duplicate=False)))

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
                if self.closed:
                    for group in spec["groups"]:
                        group["params"] = [info_to_wire(info) for info in group["params"]]
                    self.definitions[key] = Definition(kind, ps_wire.encode(spec), ())
                else:
                    self.definitions[key] = Definition(kind, cloudpickle.dumps(spec), ())
            elif kind == "per_worker":
                payload, refs = self.export_value(obj.recipe)
                self.definitions[key] = Definition(kind, payload, tuple(sorted(refs)))
            elif self.closed:
                payload, refs = self._encode(self._closed_definition(obj, kind), root=obj)
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
    module = sys.modules.get(where_defined(obj)[0] or "")
    file = os.path.realpath(module_file(module) or "")
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
