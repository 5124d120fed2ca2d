"""Describe `compile` arguments as JSON and rebuild them, without pickle.

A saved model records how it was compiled so `distrib.models.load_model` can
compile the rebuilt model the same way. Each identifier becomes a small JSON
*spec*:

==========================================  =============================================
given to ``compile``                        spec
==========================================  =============================================
``"sgd"``, ``"mse"``, ``"accuracy"``        ``{"name": "sgd"}``
``distrib.losses.MeanSquaredError()``       ``{"class": "distrib.losses.MeanSquaredError",
                                            "config": {...}}`` (from ``get_config()``)
``torch.optim.Adam(params, lr=1e-3)``       ``{"torch_optimizer": "Adam", "defaults": {...}}``
an importable function ``pkg.mod.fn``       ``{"function": "pkg.mod:fn"}``
==========================================  =============================================

Lists and dicts of identifiers become lists and dicts of specs. Rebuilding
only instantiates classes from ``distrib.*`` and ``torch.optim`` and imports
functions by their recorded name; nothing is unpickled.

Example:
    >>> to_spec("mse")
    {'name': 'mse'}
    >>> from_spec({"name": "mse"})
    'mse'
"""
from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Dict, Optional

import torch

from distrib.training.errors import SerializationError
from distrib.training.saving.keras_config import from_config_of, get_config_of
from distrib.training.saving.registry import find, import_by_path, importable_path, is_registered

__all__ = ["to_spec", "from_spec", "import_by_path", "importable_path", "SerializationError"]

_ALLOWED_CLASS_PREFIXES = ("distrib.",)


def to_spec(identifier: Any, what: str = "compile argument") -> Any:
    """The JSON spec of a compile identifier (see the module docstring)."""
    if identifier is None:
        return None
    if isinstance(identifier, str):
        return {"name": identifier}
    if isinstance(identifier, (list, tuple)):
        return {"list": [to_spec(v, what) for v in identifier]}
    if isinstance(identifier, dict):
        return {"dict": {str(k): to_spec(v, what) for k, v in identifier.items()}}
    if isinstance(identifier, (int, float)) and not isinstance(identifier, bool):
        return {"number": identifier}
    if isinstance(identifier, torch.optim.Optimizer):
        return {"torch_optimizer": type(identifier).__name__, "defaults": _jsonable(identifier.defaults)}
    if inspect.isfunction(identifier) or inspect.isbuiltin(identifier) or inspect.isclass(identifier):
        path = importable_path(identifier)
        if path is None:
            raise SerializationError(
                f"cannot save {what} {identifier!r}: it is not importable by name (a lambda or local "
                "function?); use a module-level function, a name, or a distrib object")
        return {"function": path}
    cls = type(identifier)
    class_path = f"{cls.__module__}.{cls.__qualname__}"
    get_config = get_config_of(identifier)
    if class_path.startswith(_ALLOWED_CLASS_PREFIXES) and get_config is not None:
        return {"class": _public_class_path(cls), "config": _jsonable(get_config())}
    path = importable_path(cls)
    if path is not None and get_config is not None:
        return {"custom_class": path, "config": _jsonable(get_config())}
    raise SerializationError(
        f"cannot save {what} {identifier!r}: give it a get_config() and make its class importable, "
        "or compile with a name / distrib object")


def from_spec(spec: Any, what: str = "compile argument",
              custom_objects: Optional[Dict[str, Any]] = None) -> Any:
    """Rebuild an identifier from `to_spec`'s output; torch optimizers come back as a factory.

    A ``torch_optimizer`` spec returns a callable ``factory(params) -> torch.optim.Optimizer``.
    """
    if spec is None:
        return None
    if not isinstance(spec, dict) or len(spec) == 0:
        raise SerializationError(f"saved {what} spec {spec!r} is malformed")
    custom_objects = custom_objects or {}
    if "name" in spec:
        return custom_objects.get(spec["name"], spec["name"])
    if "list" in spec:
        return [from_spec(v, what, custom_objects) for v in spec["list"]]
    if "dict" in spec:
        return {k: from_spec(v, what, custom_objects) for k, v in spec["dict"].items()}
    if "number" in spec:
        return spec["number"]
    if "function" in spec:
        return _trusted_function(spec["function"], custom_objects, what)
    if "torch_optimizer" in spec:
        return _torch_optimizer_factory(spec["torch_optimizer"], spec.get("defaults") or {})
    if "class" in spec or "custom_class" in spec:
        path = spec.get("class") or spec["custom_class"]
        if "class" in spec and not path.startswith(_ALLOWED_CLASS_PREFIXES):
            raise SerializationError(f"saved {what} names class {path!r} outside distrib; refusing to build it")
        cls = _trusted_class(path if ":" in path else _colon(path), custom_objects, what)
        config = spec.get("config") or {}
        if not isinstance(config, dict):
            raise SerializationError(f"saved {what} config of {path!r} must be an object")
        from_config = from_config_of(cls)
        return from_config(config) if from_config is not None else cls(**config)
    raise SerializationError(f"saved {what} spec has unknown keys {sorted(spec)}")


_TRUSTED_FUNCTION_MODULES = ("distrib.", "torch.nn.functional")
_TRUSTED_BASES = (("distrib.losses.base", "Loss"), ("distrib.metrics.base", "Metric"),
                  ("distrib.optimizers.base", "Optimizer"), ("distrib.optimizers.schedules", "LearningRateSchedule"),
                  ("torch.optim", "Optimizer"), ("torch.nn", "Module"))


def _trusted_function(path: str, custom_objects: Dict[str, Any], what: str) -> Any:
    """A function named by a saved compile config: given, registered, or one of distrib's / torch's."""
    if custom_objects.get(path) is not None:
        return custom_objects[path]
    found = find(path if ":" in path else _colon(path), custom_objects, True, what, "load_model")
    module = getattr(found, "__module__", "") or ""
    if callable(found) and (is_registered(found) or found in custom_objects.values()
                            or module.startswith(_TRUSTED_FUNCTION_MODULES)):
        return found
    raise SerializationError(f"saved {what} names function {path!r}, which is neither distrib's nor registered; "
                             "refusing to call it (register it with @distrib.saving.register_serializable or pass "
                             f"custom_objects={{{path!r}: fn}})")


def _trusted_class(path: str, custom_objects: Dict[str, Any], what: str) -> type:
    """A loss / metric / optimizer / schedule / module class named by a saved compile config."""
    found = find(path, custom_objects, True, what, "load_model")
    bases = []
    for module_name, name in _TRUSTED_BASES:
        try:
            bases.append(getattr(importlib.import_module(module_name), name))
        except (ImportError, AttributeError):
            continue
    if inspect.isclass(found) and (is_registered(found) or found in custom_objects.values()
                                   or issubclass(found, tuple(bases))):
        return found
    raise SerializationError(f"saved {what} names {path!r}, which is not a loss, metric, optimizer, schedule or "
                             "module class; refusing to build it (register it or pass custom_objects)")


def _colon(dotted: str) -> str:
    module, _, name = dotted.rpartition(".")
    return f"{module}:{name}"


def _public_class_path(cls: type) -> str:
    """``distrib.losses.MeanSquaredError`` rather than its defining submodule, when exported there."""
    parts = cls.__module__.split(".")
    for depth in range(2, len(parts) + 1):
        candidate = ".".join(parts[:depth])
        try:
            if getattr(importlib.import_module(candidate), cls.__qualname__, None) is cls:
                return f"{candidate}.{cls.__qualname__}"
        except ImportError:
            continue
    return f"{cls.__module__}.{cls.__qualname__}"


def _torch_optimizer_factory(name: str, defaults: Dict[str, Any]) -> Callable[[Any], torch.optim.Optimizer]:
    cls = getattr(torch.optim, name, None)
    if not (inspect.isclass(cls) and issubclass(cls, torch.optim.Optimizer)):
        raise SerializationError(f"saved optimizer torch.optim.{name} does not exist in this torch version")
    accepted = inspect.signature(cls).parameters
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in defaults.items() if k in accepted}

    def factory(params: Any) -> torch.optim.Optimizer:
        return cls(params, **kwargs)
    factory.__name__ = f"torch.optim.{name}"
    return factory


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise SerializationError(f"config value {value!r} of type {type(value).__name__} is not JSON-serialisable")
