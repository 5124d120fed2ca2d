"""Where a user's object was defined: its module, its qualified name, the module's file.

Functions and classes carry ``__module__`` and ``__qualname__``; other objects
(a ``functools.partial``, an instance, a builtin) may lack either, so these are
the one place that asks, and every caller gets None for what is missing.

Example:
    >>> import functools, json, sys
    >>> where_defined(json.dumps)
    ('json', 'dumps')
    >>> where_defined(functools.partial(json.dumps))[1] is None
    True
    >>> module_file(sys), module_file(None)        # a builtin module has no file
    (None, None)
"""
from __future__ import annotations

import inspect
import types
from typing import Any, Optional, Tuple

__all__ = ["where_defined", "display_name", "module_file"]


def where_defined(obj: Any) -> Tuple[Optional[str], Optional[str]]:
    """``(obj.__module__, obj.__qualname__)``, None for either that ``obj`` lacks."""
    module = getattr(obj, "__module__", None)  # any user object: a partial or a builtin may have no module
    qualname = getattr(obj, "__qualname__", None)  # any user object: an instance or a partial has no qualname
    return module, qualname


def display_name(obj: Any) -> Optional[str]:
    """``obj.__qualname__``, else ``obj.__name__`` (a module, some builtins), else None."""
    return where_defined(obj)[1] or getattr(obj, "__name__", None)  # any user object: names are optional


def module_file(module: Any) -> Optional[str]:
    """The file ``module`` was loaded from; None for a builtin or frozen module, ``__main__``
    under ``-c`` or a shell, a namespace package, and anything that is not a module."""
    if not isinstance(module, types.ModuleType):
        return None
    try:
        return inspect.getfile(module)
    except TypeError:  # inspect's answer for a module without a file
        return None
