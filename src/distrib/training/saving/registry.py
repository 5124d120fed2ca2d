"""Which classes and functions a saved model may name, and how a name becomes one (the trust model).

A saved model is a file, and a file may come from anyone. The names in it
are resolved here, and only here, with these rules:

* **Module classes** (the model's ``torch.nn.Module`` and its custom
  sub-modules) are found, in this order, in ``custom_objects``, among the
  classes registered with `register_serializable`, in the program being run
  (``__main__``), or by import path ``"package.module:Class"``. Whatever is
  found must be a *class* deriving from ``torch.nn.Module``; anything else
  (``os:system``, ``subprocess:Popen``) is refused with one error line and
  never called.
* **Imports**: a module named by a file is imported only when it is already
  imported or its top-level package is (the program imported ``mypkg``, so
  ``mypkg.models`` may be imported), or when the caller passes
  ``safe_mode=False``. Names are plain dotted identifiers.
* **Functions** named by a file (a recorded ``builder=``) are called only
  when registered, given in ``custom_objects``, or given by the caller as
  ``load_model(path, builder=...)``: a function can do anything with the
  arguments the file supplies, a module class can only build a module.

Residual trust: constructing an allowed ``torch.nn.Module`` subclass runs its
``__init__`` (or ``from_config``) with arguments from the file, and importing
an allowed module runs its top-level code. Load files you did not write with
the default ``safe_mode=True``.

Example:
    >>> @register_serializable(package="my_models")
    ... class Block(torch.nn.Module):
    ...     def __init__(self, width=4):
    ...         super().__init__()
    ...         self.fc = torch.nn.Linear(width, width)
    ...     def get_config(self):
    ...         return {"width": self.fc.in_features}
    >>> get_registered_name(Block)
    'my_models>Block'
"""
from __future__ import annotations

import importlib
import inspect
import re
import sys
from typing import Any, Callable, Dict, Optional

import torch

from distrib.training.errors import SerializationError
from distrib.training.saving.keras_config import from_config_of
from distrib.utils.callables import where_defined

__all__ = ["register_serializable", "get_registered_name", "get_registered_object", "class_name",
           "resolve_module_class", "resolve_builder", "build_module", "find", "is_registered",
           "importable_path", "import_by_path"]

_REGISTRY: Dict[str, Any] = {}
_NAMES: Dict[Any, str] = {}
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def importable_path(obj: Any) -> Optional[str]:
    """``"module:qualname"`` if ``obj`` can be imported back by that name, else None."""
    module, qualname = where_defined(obj)
    if not module or not qualname or "<" in qualname:
        return None
    try:
        found = _resolve_attr(importlib.import_module(module), qualname)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qualname}" if found is obj else None


def import_by_path(path: str, what: str = "object") -> Any:
    """Import ``"pkg.mod:attr.sub"`` (or ``"pkg.mod.attr"``) and return the attribute."""
    if not isinstance(path, str) or not path.strip():
        raise SerializationError(f"{what} must be an import path like 'pkg.module:function', got {path!r}")
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise SerializationError(f"{what} {path!r} is not an import path like 'pkg.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise SerializationError(f"{what} {path!r}: cannot import module {module_name!r} ({e}); "
                                 "make it importable (PYTHONPATH) or pass it explicitly") from e
    try:
        return _resolve_attr(module, attr)
    except AttributeError:
        raise SerializationError(f"{what} {path!r}: module {module_name!r} has no attribute {attr!r}") from None


def _resolve_attr(module: Any, qualname: str) -> Any:
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def register_serializable(package: str = "Custom", name: Optional[str] = None) -> Callable[[Any], Any]:
    """Decorator: ``load_model`` may rebuild this module class (or call this builder function).

    Keras's ``register_keras_serializable``: the object is saved as
    ``"package>name"`` and found by that name wherever it was registered
    (the loading program must define or import it first).
    """
    if not isinstance(package, str) or ">" in package:
        raise ValueError(f"register_serializable: package must be a str without '>', got {package!r}")

    def decorate(obj: Any) -> Any:
        key = f"{package}>{name or obj.__name__}"
        if not (inspect.isclass(obj) and issubclass(obj, torch.nn.Module)) and not inspect.isfunction(obj):
            raise TypeError(f"register_serializable: {key} must be a torch.nn.Module subclass or a function, "
                            f"got {type(obj).__name__}")
        _REGISTRY[key] = obj
        _NAMES[obj] = key
        return obj
    return decorate


def get_registered_name(obj: Any) -> Optional[str]:
    """``"package>name"`` of a registered object, else None."""
    return _NAMES.get(obj)


def get_registered_object(name: str, custom_objects: Optional[Dict[str, Any]] = None) -> Any:
    """The object registered (or given in ``custom_objects``) under ``name``, else None."""
    if custom_objects and name in custom_objects:
        return custom_objects[name]
    return _REGISTRY.get(name)


def class_name(obj: Any) -> Optional[str]:
    """How a save records ``obj``: its registered name, else ``"module:qualname"`` (``__main__`` too), else None."""
    registered = _NAMES.get(obj)
    if registered:
        return registered
    path = importable_path(obj)
    if path is not None:
        return path
    module, qualname = getattr(obj, "__module__", ""), getattr(obj, "__qualname__", "")
    if module == "__main__" and "<" not in qualname and _lookup(sys.modules.get("__main__"), qualname) is obj:
        return f"__main__:{qualname}"
    return None


def is_registered(obj: Any) -> bool:
    """True for a class or function decorated with `register_serializable`."""
    try:
        return obj in _NAMES
    except TypeError:  # unhashable
        return False


def _lookup(module: Any, qualname: str) -> Any:
    try:
        return _resolve_attr(module, qualname)
    except AttributeError:
        return None


def _custom(name: str, custom_objects: Optional[Dict[str, Any]]) -> Any:
    if not custom_objects:
        return None
    tail = name.rpartition(":")[2] if ":" in name else name.rpartition(">")[2]
    short = tail.rpartition(".")[2]
    for key in (name, name.replace(":", "."), short):
        if key in custom_objects:
            return custom_objects[key]
    return None


def find(name: str, custom_objects: Optional[Dict[str, Any]], safe_mode: bool, what: str, where: str) -> Any:
    """What a saved ``name`` means: in ``custom_objects``, registered, or imported by the rules above.

    Raises `SerializationError` (one line naming ``what`` and ``where``) when
    it is none of those; the caller checks what kind of object came back.
    """
    if not isinstance(name, str) or not name:
        raise SerializationError(f"{where}: malformed {what} name {name!r}")
    found = _custom(name, custom_objects)
    if found is None:
        found = _REGISTRY.get(name)
    if found is not None:
        return found
    if ">" in name and ":" not in name:
        raise SerializationError(f"{where}: {what} {name!r} is not registered in this program; import or define "
                                 f"it (decorated with @distrib.saving.register_serializable) or pass "
                                 f"custom_objects={{{name.rpartition('>')[2]!r}: ...}}")
    module_name, sep, qualname = name.partition(":")
    if "<locals>" in qualname:
        raise SerializationError(f"{where}: {what} {name!r} was defined inside a function, so the file cannot name "
                                 f"it for import: pass custom_objects={{{qualname.rpartition('.')[2]!r}: ...}} or "
                                 "load_model(path, builder=...)")
    if not sep or not _DOTTED.match(module_name) or not _DOTTED.match(qualname):
        raise SerializationError(f"{where}: {what} {name!r} is not a name like 'package.module:Class'")
    module = sys.modules.get(module_name)
    if module is None and module_name != "__main__":
        top = module_name.split(".")[0]
        if safe_mode and top not in sys.modules:
            raise SerializationError(
                f"{where}: {what} {name!r} is in package {top!r}, which this program has not imported; import it "
                f"first, register the class, pass custom_objects, or load with safe_mode=False to allow the import")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise SerializationError(f"{where}: {what} {name!r}: cannot import {module_name!r} ({e})") from None
    found = _lookup(module, qualname)
    if found is None:
        raise SerializationError(f"{where}: {what} {name!r} is not defined in {module_name!r}; define or import it "
                                 f"in the loading program, or pass custom_objects={{{qualname!r}: ...}}")
    return found


def resolve_module_class(name: str, custom_objects: Optional[Dict[str, Any]] = None, safe_mode: bool = True,
                         where: str = "load_model") -> type:
    """The ``torch.nn.Module`` subclass a file names (see the module docstring); one error line otherwise."""
    found = find(name, custom_objects, safe_mode, "module class", where)
    if not (inspect.isclass(found) and issubclass(found, torch.nn.Module)):
        raise SerializationError(f"{where}: {name!r} is a {type(found).__name__}, not a torch.nn.Module subclass; "
                                 "refusing to call it")
    return found


def resolve_builder(name: str, custom_objects: Optional[Dict[str, Any]] = None, safe_mode: bool = True,
                    where: str = "load_model") -> Any:
    """What a file's recorded ``builder`` names: a module class, or a registered / ``custom_objects`` function."""
    given = _custom(name, custom_objects)
    if given is not None:
        return given
    found = find(name, custom_objects, safe_mode, "builder", where)
    if (inspect.isclass(found) and issubclass(found, torch.nn.Module)) or is_registered(found):
        return found
    raise SerializationError(
        f"{where}: the file names builder {name!r}, which is neither a torch.nn.Module subclass nor a registered "
        f"function; refusing to call it (register it with @distrib.saving.register_serializable, pass "
        f"custom_objects={{{name!r}: fn}}, or load_model(path, builder=...))")


def build_module(cls: type, config: Any, where: str) -> torch.nn.Module:
    """``cls.from_config(config)`` (or ``cls(**config)``; ``cls()`` without a config), checked to be a module."""
    try:
        if config is None:
            module = cls()
        elif (from_config := from_config_of(cls)) is not None:
            module = from_config(config)
        elif isinstance(config, dict):
            module = cls(**config)
        else:
            raise TypeError(f"config must be a dict, got {type(config).__name__}")
    except (TypeError, ValueError) as e:
        raise SerializationError(f"{where}: cannot build {cls.__qualname__} from its saved config ({e})") from e
    if not isinstance(module, torch.nn.Module):
        raise SerializationError(f"{where}: {cls.__qualname__} built a {type(module).__name__}, not a module")
    return module
