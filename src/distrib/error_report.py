"""One-line reports of distrib's errors: the handler behind distrib's ``sys.excepthook``.

`excepthook` (installed by `distrib.hooks.install_excepthook`) makes an uncaught
`distrib.errors.DistribError` — a diagnosis distrib made on purpose (a bad
``TF_CONFIG``, a rendezvous that timed out, a lost task, a damaged
checkpoint, a bad setting) — prints **one line** naming the task, the error
and what to do, instead of a traceback through distrib's internals::

    distrib: worker 1: ClusterConfigError: TF_CONFIG['task']['index']: 2 is out of range ...
        (full traceback: set DISTRIB_VERBOSE=1 or use distrib launch --verbose)

Everything else — the program's own exceptions, ``KeyboardInterrupt``, and
distrib's errors when ``DISTRIB_VERBOSE=1`` — goes to the hook that was
there before, so a user's bug keeps its full traceback.

`distrib.hooks` installs the hook when a cluster task imports distrib
(``distrib launch``, ``TF_CONFIG`` or torchrun's ``RANK`` set) and when a
strategy is created; installing it twice is harmless.

Example:
    >>> import os
    >>> task_label({"DISTRIB_TASK_NAME": "worker 1"}), task_label({"RANK": "3"})
    ('worker 1', 'rank 3')
    >>> from distrib.cluster.errors import ClusterConfigError
    >>> one_line(ClusterConfigError("TF_CONFIG['task']: missing"), "chief")
    "distrib: chief: ClusterConfigError: TF_CONFIG['task']: missing"
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from types import TracebackType
from typing import Mapping, Optional, Type

from distrib.errors import DistribError, first_line

__all__ = ["excepthook", "is_cluster_task", "task_label", "one_line", "short_cause", "verbose",
           "VERBOSE_HINT"]

_TASK_TYPES = ("chief", "worker", "ps", "evaluator")
VERBOSE_HINT = "(full traceback: set DISTRIB_VERBOSE=1 or use distrib launch --verbose)"
_MAX_CHARS = 600


def verbose(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether ``DISTRIB_VERBOSE`` asks for full tracebacks (``1``, ``true``, ``yes``)."""
    value = (os.environ if environ is None else environ).get("DISTRIB_VERBOSE", "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def is_cluster_task(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether this process is a task of a cluster (launched, ``TF_CONFIG`` or torchrun)."""
    env = os.environ if environ is None else environ
    return env.get("DISTRIB_LAUNCHED") == "1" or bool(env.get("TF_CONFIG", "").strip()) \
        or ("RANK" in env and "WORLD_SIZE" in env)


def task_label(environ: Optional[Mapping[str, str]] = None) -> str:
    """How the one-line error names this process: ``worker 1``, ``chief``, ``rank 3``, ``this process``."""
    env = os.environ if environ is None else environ
    if env.get("DISTRIB_TASK_NAME"):
        return env["DISTRIB_TASK_NAME"]
    try:
        task = json.loads(env.get("TF_CONFIG") or "{}").get("task") or {}
        task_type, index = task.get("type"), task.get("index")
        if task_type in _TASK_TYPES:  # a bad type or index is what the error is about: not a label
            valid = isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 1 << 20
            return f"{task_type} {index}" if valid else f"a {task_type} task"
    except (ValueError, AttributeError, TypeError, RecursionError):
        pass
    if env.get("RANK"):
        return f"rank {env['RANK']}"
    return "this process"


def one_line(error: BaseException, label: str) -> str:
    """``distrib: <task>: <ErrorClass>: <first line of the message>``."""
    message = first_line(error) if str(error).strip() else "(no message)"
    if len(message) > _MAX_CHARS:
        message = message[:_MAX_CHARS] + "..."
    return f"distrib: {label}: {type(error).__name__}: {message}"


def short_cause(line: str, label: str) -> str:
    """A task's one-line error without the parts a summary already says (task name, hint).

    Example:
        >>> short_cause("distrib: worker 1: RendezvousError: no chief " + VERBOSE_HINT, "worker 1")
        'RendezvousError: no chief'
    """
    head = f"distrib: {label}: "
    if line.startswith(head):
        line = line[len(head):]
    if line.endswith(VERBOSE_HINT):
        line = line[:-len(VERBOSE_HINT)].rstrip()
    return line


def excepthook(kind: Type[BaseException], error: BaseException,
               tb: Optional[TracebackType]) -> None:
    """Report an uncaught distrib error in one line; hand anything else to ``previous_excepthook``.

    Re-entered while it is already reporting (a chain of hooks that loops
    back to it), it prints with Python's own hook instead of going round
    again: a failure is reported once, never as a ``RecursionError``.
    """
    if getattr(_reporting, "active", False):
        sys.__excepthook__(kind, error, tb)
        return
    _reporting.active = True
    try:
        _tell_torchrun(error)
        if isinstance(error, DistribError) and not verbose():
            try:
                sys.stderr.write(f"{one_line(error, task_label())} {VERBOSE_HINT}\n")
                sys.stderr.flush()
                return
            except Exception:  # a broken stderr: fall back to the usual report
                pass
        previous_excepthook(kind, error, tb)
    finally:
        _reporting.active = False


_reporting = threading.local()


def _tell_torchrun(error: BaseException) -> None:
    """Give torchrun's agent the one-line cause for its summary (its ``TORCHELASTIC_ERROR_FILE``).

    Without it the agent's "Root Cause" says only "To enable traceback see ...";
    with it, it names the exception. The traceback itself is printed once, by
    the task; the file holds one line so the agent does not print it again.
    """
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.path.exists(path) or isinstance(error, (KeyboardInterrupt, SystemExit)):
        return
    try:
        with open(path, "x", encoding="utf-8") as out:
            line = one_line(error, task_label())[len("distrib: "):]
            json.dump({"message": {"message": line, "extraInfo": {
                "py_callstack": line, "timestamp": str(int(time.time()))}}}, out)
    except OSError:  # the agent's directory is gone or unwritable: its summary stays generic
        pass


#: The hook that was installed before `excepthook` (set by `distrib.hooks`).
previous_excepthook = sys.excepthook
