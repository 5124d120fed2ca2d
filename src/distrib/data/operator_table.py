"""Where `Dataset`'s methods find the operators that implement them.

`Dataset` is the base class of every operator, and its chainable methods
(``map``, ``batch``, ...) create operators: with direct imports the two would
import each other. Instead `distrib.data.catalog`, imported by the package,
binds every implementation here once, by its own name, and a method asks
for it with `operator`, so ``Dataset.batch`` reads ``operator("BatchDataset")``
and the class it names lives in `distrib.data.transforms.batching`.

Example:
    >>> operator("BatchDataset").__module__
    'distrib.data.transforms.batching'
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable

from distrib.errors import DistribError

__all__ = ["bind", "operator", "UnboundOperatorError"]

_OPERATORS: Dict[str, Callable[..., Any]] = {}


class UnboundOperatorError(DistribError, LookupError):
    """A `Dataset` method's implementation was never bound (``distrib.data`` not imported)."""


def bind(implementations: Iterable[Callable[..., Any]]) -> None:
    """Make each implementation (a class or function) available under its ``__name__``."""
    for implementation in implementations:
        _OPERATORS[implementation.__name__] = implementation


def operator(name: str) -> Callable[..., Any]:
    """The implementation bound as ``name`` (an error naming it if the catalog never bound it)."""
    try:
        return _OPERATORS[name]
    except KeyError:
        raise UnboundOperatorError(f"no dataset operator {name!r} is bound: import distrib.data (its catalog "
                          f"binds them) before building pipelines") from None
