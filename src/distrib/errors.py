"""The root of distrib's own errors.

Every error distrib raises on purpose derives from `DistribError` (and, where a
built-in type says more, from that too: a `ClusterConfigError` is also a
`ValueError`), so one ``except distrib.DistribError`` catches distrib's
diagnoses and lets the program's own exceptions through.

Example:
    >>> from distrib.cluster.errors import ClusterConfigError
    >>> issubclass(ClusterConfigError, DistribError), issubclass(ClusterConfigError, ValueError)
    (True, True)
"""
from __future__ import annotations

__all__ = ["DistribError"]


class DistribError(Exception):
    """Base class of every error distrib raises to explain a failure."""
