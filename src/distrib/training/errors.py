"""The training package's error classes, below every module that raises them.

`SerializationError` (re-exported by `distrib.training.saving.serialization`): a
compile argument or builder cannot be described as JSON, or a saved name
cannot be rebuilt. `WeightsMismatchError` (re-exported by
`distrib.training.saving.weights`): saved weights do not fit the module.

Example:
    >>> issubclass(WeightsMismatchError, ValueError), issubclass(SerializationError, DistribError)
    (True, True)
"""
from __future__ import annotations

from distrib.errors import DistribError

__all__ = ["SerializationError", "WeightsMismatchError"]


class SerializationError(DistribError, ValueError):
    """A compile argument or builder cannot be described as JSON, or a spec cannot be rebuilt."""


class WeightsMismatchError(DistribError, ValueError):
    """The saved weights do not fit the module (missing, unexpected or differently shaped keys)."""
