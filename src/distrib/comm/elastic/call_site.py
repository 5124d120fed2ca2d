"""Where the program issued a collective: the name an elastic log entry carries.

A replacement re-executes the same code, so the first frames of the program
(outside distrib's collective machinery) tell a collective apart from another
of the same shape issued elsewhere. The name is computed on every collective
of an elastic task, so it is cheap: each code object is classified once, and
each distinct chain of frames is formatted once.

Example (a gradient bucket launched from a backward hook)::

    grad_sync.py:_launch:213<grad_sync.py:_on_grad_ready:185<grad_sync.py:<lambda>:122<graph.py:...
"""
from __future__ import annotations

import os
import sys
from types import CodeType
from typing import Any, Dict, List, Tuple

__all__ = ["call_site", "INTERNAL_FILES"]

#: Files whose frames are distrib's collective machinery, never the program's.
INTERNAL_FILES = tuple(os.path.join("distrib", "comm", *parts) for parts in (
    ("elastic", "collective.py"), ("collective.py",), ("elastic", "membership.py"), ("elastic", "resize.py"),
    ("elastic", "inflight.py"), ("elastic", "snapshots.py"), ("elastic", "call_site.py")))

_FORK_SERVER = os.path.join("distrib", "process", "fork_server.py")
_PROGRAM, _INTERNAL, _LAUNCHER = 0, 1, 2
_kinds: Dict[CodeType, int] = {}
_names: Dict[Tuple[Any, ...], str] = {}


def _kind(code: CodeType) -> int:
    kind = _kinds.get(code)
    if kind is None:
        name = code.co_filename
        kind = _LAUNCHER if name.endswith(_FORK_SERVER) else _INTERNAL if name.endswith(INTERNAL_FILES) else _PROGRAM
        _kinds[code] = kind
    return kind


def call_site(depth: int = 4, skip: int = 2) -> str:
    """The first ``depth`` program frames above the caller's caller (``skip``), joined by ``<``.

    A task forked by `distrib launch` runs its script below the fork server's
    frames; the walk stops there, so a forked replacement and a survivor that
    was a new process name a collective alike.
    """
    frame = sys._getframe(skip)
    key: List[Any] = []  # code object, instruction offset (cheaper than the line number), ...
    frames = []
    while frame is not None and len(frames) < depth:
        kind = _kind(frame.f_code)
        if kind == _LAUNCHER:
            break
        if kind == _PROGRAM:
            key += (frame.f_code, frame.f_lasti)
            frames.append(frame)
        frame = frame.f_back
    chain = tuple(key)
    name = _names.get(chain)
    if name is None:
        name = _names[chain] = "<".join(f"{os.path.basename(f.f_code.co_filename)}:{f.f_code.co_name}:{f.f_lineno}"
                                        for f in frames)
    return name
