"""Apply a function to every leaf of a nested structure of tuples, lists and dicts.

`is_namedtuple` is distrib's one check for a namedtuple (a structure whose
type is rebuilt from its fields, not a sequence of values).

Example:
    >>> map_structure(lambda x: x * 2, {"a": (1, 2), "b": [3]})
    {'a': (2, 4), 'b': [6]}
"""
from __future__ import annotations

from typing import Any, Callable, List

__all__ = ["map_structure", "flatten", "is_namedtuple"]


def is_namedtuple(value: Any) -> bool:
    """Whether ``value`` is a namedtuple (rebuilt as ``type(value)(*fields)``, not ``type(value)(values)``).

    Example:
        >>> import collections
        >>> is_namedtuple(collections.namedtuple("P", "x y")(1, 2)), is_namedtuple((1, 2))
        (True, False)
    """
    return hasattr(value, "_fields")


def map_structure(fn: Callable[[Any], Any], value: Any) -> Any:
    if isinstance(value, dict):
        return type(value)((k, map_structure(fn, v)) for k, v in value.items())
    if isinstance(value, tuple) and type(value) is not tuple and is_namedtuple(value):  # (a plain tuple asks nothing)
        return type(value)(*(map_structure(fn, v) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(map_structure(fn, v) for v in value)
    return fn(value)


def flatten(value: Any) -> List[Any]:
    out: List[Any] = []
    map_structure(out.append, value)
    return out
