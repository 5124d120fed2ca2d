"""Describe a module tree built from standard ``torch.nn`` layers as JSON, and rebuild it.

`Model.save` records this description when no builder is given, so
`distrib.models.load_model(path)` rebuilds a ``torch.nn.Sequential`` (or
``ModuleList``/``ModuleDict``) of standard layers without ``builder=``.
Each layer becomes its class name in ``torch.nn`` and its constructor
arguments, read back from the layer's attributes of the same names::

    torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU())
    -> {"class": "Sequential", "children": [["0", {"class": "Linear",
         "args": {"in_features": 4, "out_features": 2, "bias": true}}], ["1", {"class": "ReLU", ...}]]}

A module of the user's own class is recorded as ``{"custom": name, "config":
module.get_config()}`` (``config`` None when its constructor needs no
arguments), ``name`` being its registered name, import path or ``__main__``
name; rebuilding resolves it with `distrib.training.saving.registry` (only
``torch.nn.Module`` subclasses are ever built). Standard layers are looked up
in ``torch.nn`` only; nothing is unpickled. A description is only
recorded when rebuilding it gives a module with the same ``repr`` and the
same state_dict keys and shapes as the original; a custom class without
``get_config()`` whose constructor needs arguments, or a layer whose arguments
cannot be read back, makes `describe` return None (the save then needs ``builder=``).

Example:
    >>> spec = describe(torch.nn.Sequential(torch.nn.Linear(4, 2)))
    >>> rebuild(spec)
    Sequential(
      (0): Linear(in_features=4, out_features=2, bias=True)
    )
"""
from __future__ import annotations

import inspect
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import torch

from distrib.training.saving.keras_config import get_config_of
from distrib.training.saving.serialization import SerializationError

__all__ = ["describe", "rebuild"]

_CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")
_SKIPPED_ARGS = {"self", "device", "dtype"}
_MAX_DEPTH = 64


class _Unsupported(Exception):
    pass


def _standard_class(name: Any) -> Optional[type]:
    """``torch.nn.<name>`` if it is a standard module class, else None."""
    if not isinstance(name, str) or not name.isidentifier():
        return None
    cls = getattr(torch.nn, name, None)
    if inspect.isclass(cls) and issubclass(cls, torch.nn.Module) and cls.__module__.startswith("torch.nn.modules"):
        return cls
    return None


def _encode_value(value: Any) -> Any:
    if isinstance(value, (torch.Tensor, torch.nn.Parameter)):
        return True  # a tensor attribute stands for a flag such as bias=True
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Size):
        value = tuple(value)
    if isinstance(value, tuple):
        return {"tuple": [_encode_value(v) for v in value]}
    if isinstance(value, list):
        return [_encode_value(v) for v in value]
    raise _Unsupported(type(value).__name__)


def _decode_value(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_decode_value(v, where) for v in value]
    if isinstance(value, dict) and set(value) == {"tuple"} and isinstance(value["tuple"], list):
        return tuple(_decode_value(v, where) for v in value["tuple"])
    raise SerializationError(f"{where}: unsupported argument value {value!r} in the saved architecture")


def _layer_args(module: torch.nn.Module) -> Dict[str, Any]:
    params = inspect.signature(type(module).__init__).parameters.values()
    args: Dict[str, Any] = {}
    for p in params:
        if p.name in _SKIPPED_ARGS or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name == "bias" and hasattr(module, "bias"):
            args["bias"] = getattr(module, "bias") is not None
            continue
        if not hasattr(module, p.name):
            if p.default is p.empty:
                raise _Unsupported(f"{type(module).__name__}.{p.name}")
            continue
        args[p.name] = _encode_value(getattr(module, p.name))
    return args


def _describe_custom(module: torch.nn.Module, seen: Dict[str, type]) -> Dict[str, Any]:
    """A module of the user's own class: its registered name or import path, and its ``get_config()``.

    A class defined inside a function is recorded by ``module:qualname`` too; loading
    it then needs ``custom_objects``.
    """
    from distrib.training.saving.registry import class_name
    from distrib.training.saving.serialization import _jsonable

    cls = type(module)
    name = class_name(cls) or f"{cls.__module__}:{cls.__qualname__}"
    seen[name] = cls
    get_config = get_config_of(module)
    if get_config is not None:
        return {"custom": name, "config": _jsonable(get_config())}
    params = inspect.signature(cls).parameters.values()
    if any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        raise _Unsupported(f"{cls.__qualname__} needs constructor arguments and has no get_config()")
    return {"custom": name, "config": None}


def _describe(module: torch.nn.Module, depth: int, seen: Dict[str, type]) -> Dict[str, Any]:
    name = type(module).__name__
    if depth > _MAX_DEPTH:
        raise _Unsupported(name)
    if _standard_class(name) is not type(module):
        return _describe_custom(module, seen)
    if name in _CONTAINERS:
        return {"class": name, "children": [[k, _describe(m, depth + 1, seen)] for k, m in module.named_children()]}
    if list(module.children()):
        raise _Unsupported(f"{name} with submodules")
    return {"class": name, "args": _layer_args(module)}


def _signature(module: torch.nn.Module) -> Tuple[str, List[Tuple[str, Tuple[int, ...]]]]:
    return repr(module), [(k, tuple(v.shape)) for k, v in module.state_dict().items()]


def describe(module: torch.nn.Module) -> Optional[Dict[str, Any]]:
    """The JSON description of ``module``, or None if it cannot be rebuilt from one.

    Standard ``torch.nn`` layers are described by their arguments; a module of
    the user's class by its name (registered, importable or in ``__main__``)
    and ``get_config()`` (or none, when its constructor needs no arguments).
    """
    seen: Dict[str, type] = {}
    try:
        spec = _describe(module, 0, seen)
        rebuilt = rebuild(spec, custom_objects=seen, safe_mode=False)
    except (_Unsupported, SerializationError, TypeError, ValueError):
        return None
    return spec if _signature(rebuilt) == _signature(module) else None


def rebuild(spec: Any, where: str = "architecture", custom_objects: Optional[Dict[str, Any]] = None,
            safe_mode: bool = True) -> torch.nn.Module:
    """A fresh module (new weights) from `describe`'s output.

    Only ``torch.nn`` classes and ``torch.nn.Module`` subclasses resolved by
    `distrib.training.saving.registry.resolve_module_class` are created.

    Raises:
        SerializationError: the description names an unknown class or is malformed.
    """
    return _rebuild(spec, where, 0, custom_objects, safe_mode)


def _rebuild(spec: Any, where: str, depth: int, custom_objects: Optional[Dict[str, Any]] = None,
             safe_mode: bool = True) -> torch.nn.Module:
    if depth > _MAX_DEPTH or not isinstance(spec, dict):
        raise SerializationError(f"{where}: malformed saved architecture (expected an object, nested at most "
                                 f"{_MAX_DEPTH} deep)")
    if "custom" in spec:
        from distrib.training.saving.registry import build_module, resolve_module_class

        cls = resolve_module_class(spec["custom"], custom_objects, safe_mode, where)
        return build_module(cls, spec.get("config"), where)
    name = spec.get("class")
    cls = _standard_class(name)
    if cls is None:
        raise SerializationError(f"{where}: {name!r} is not a standard torch.nn layer; rebuild it with "
                                 "load_model(path, builder='pkg.module:function')")
    if name in _CONTAINERS:
        children = spec.get("children")
        if not isinstance(children, list) or not all(
                isinstance(c, list) and len(c) == 2 and isinstance(c[0], str) for c in children):
            raise SerializationError(f"{where}: malformed children of {name}")
        built = [(key, _rebuild(child, f"{where}.{key}", depth + 1, custom_objects, safe_mode))
                 for key, child in children]
        if name == "ModuleList":
            return torch.nn.ModuleList([m for _, m in built])
        if name == "ModuleDict":
            return torch.nn.ModuleDict(dict(built))
        return torch.nn.Sequential(OrderedDict(built))
    args = spec.get("args")
    if not isinstance(args, dict) or not all(isinstance(k, str) and k.isidentifier() for k in args):
        raise SerializationError(f"{where}: malformed arguments of {name}")
    kwargs = {k: _decode_value(v, f"{where} ({name})") for k, v in args.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise SerializationError(f"{where}: cannot build torch.nn.{name}(**{kwargs}) ({e})") from e
