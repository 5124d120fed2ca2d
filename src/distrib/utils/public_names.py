"""What ``dir()`` shows of a public module: its ``__all__``, not the helpers it imports.

A module that implements its API in its own body (``distrib.plot``,
``distrib.saved_model``) or imports ``typing`` names would otherwise list
``json``, ``Optional`` or ``annotations`` beside its API in ``dir()`` and in
an editor's completion. Each public module defines
``def __dir__(): return public_dir(globals(), __all__)``.

Example:
    >>> public_dir({"__name__": "m", "json": None, "f": None, "_g": None}, ["f"])
    ['__name__', 'f']
"""
from __future__ import annotations

from typing import Iterable, List, Mapping

__all__ = ["public_dir"]


def public_dir(namespace: Mapping[str, object], public: Iterable[str]) -> List[str]:
    """The public names ``public`` and the module's dunder attributes, sorted."""
    dunders = (name for name in namespace if name.startswith("__") and name.endswith("__"))
    return sorted({*public, *dunders})
