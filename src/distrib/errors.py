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

import re
from typing import Optional, Tuple

__all__ = ["DistribError", "first_line"]


class DistribError(Exception):
    """Base class of every error distrib raises to explain a failure."""


#: A C++ source location that torch.distributed's backends put before their message: ``[../gloo.cc:12] ``.
_BACKEND_LOCATION = re.compile(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*")


def first_line(exc: BaseException, *, limit: Optional[int] = None, skip: Tuple[str, ...] = (),
               typed: bool = False, backend: bool = False) -> str:
    """The first useful line of ``exc``'s message, for a one-line error; its type's name when it has none.

    Args:
        limit: keep at most this many characters (the ``typed`` prefix included).
        skip: pass over lines that start with one of these (boilerplate).
        typed: prefix the line with the exception's type, as ``"ValueError: ..."``.
        backend: drop a backend's C++ source location and its advice from
            ``". This is typically"`` on (torch.distributed's errors).

    Example:
        >>> first_line(ValueError("\\n  bad shape (3, 4)\\n  more detail"))
        'bad shape (3, 4)'
        >>> first_line(RuntimeError("[../gloo/pair.cc:589] Connection closed by peer"), backend=True)
        'Connection closed by peer'
    """
    for line in str(exc).strip().splitlines():
        text = line.strip()
        if not text or text.startswith(skip):
            continue
        if backend:
            text = _BACKEND_LOCATION.sub("", text).split(". This is typically")[0]
        if typed:
            text = f"{type(exc).__name__}: {text}"
        return text if limit is None else text[:limit]
    return type(exc).__name__
