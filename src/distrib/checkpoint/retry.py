"""Bounded retries of checkpoint I/O against storage errors that may pass (a flaky object store, an NFS EIO).

A checkpoint save, a restore and `latest_checkpoint`'s check each run whole
again, from the start, when storage raises an `OSError` that is not final: at
most `TRIES` tries, `DELAYS` seconds apart, each retry warned about
(`CheckpointWarning`). A full disk, a read-only filesystem or a missing
permission (`FINAL_ERRNOS`) fails at once. A retried save writes a new
temporary directory and a retried restore reads the file again from its
first byte, so neither ever uses what a failed try left half done.

Example:
    >>> with_retries(lambda: write(path), f"writing checkpoint {path}")   # raises the last error if every try fails
"""
from __future__ import annotations

import errno
import time
import warnings
from typing import Callable, Tuple, TypeVar

from distrib.checkpoint.errors import CheckpointWarning
from distrib.errors import first_line

__all__ = ["TRIES", "DELAYS", "FINAL_ERRNOS", "is_final", "with_retries", "best_effort"]

#: Tries of one checkpoint operation in all.
TRIES = 3
#: Seconds to wait before the second and the third try.
DELAYS: Tuple[float, ...] = (0.5, 2.0)
#: Errors no retry can cure: the save or restore fails at once.
FINAL_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.ENOENT})

T = TypeVar("T")


def is_final(exc: BaseException) -> bool:
    """Whether ``exc`` is not a storage error that another try may not meet."""
    return not isinstance(exc, OSError) or isinstance(exc, FileNotFoundError) or exc.errno in FINAL_ERRNOS


def with_retries(operation: Callable[[], T], what: str) -> T:
    """``operation()``, tried again from the start after a passing storage error, up to `TRIES` tries.

    Raises:
        The last error, annotated with how many tries were made when more than one.
    """
    for attempt in range(1, TRIES + 1):
        try:
            return operation()
        except OSError as exc:
            if is_final(exc) or attempt == TRIES:
                if attempt == 1:
                    raise
                text = f"{exc.strerror or first_line(exc, limit=300)} (after {attempt} tries)"
                if exc.errno is None:
                    raise OSError(text) from exc
                raise OSError(exc.errno, text, *([exc.filename] if exc.filename else [])) from exc
            warnings.warn(f"{what}: {first_line(exc, limit=300)}; trying again ({attempt + 1} of {TRIES})",
                          CheckpointWarning, stacklevel=2)
            time.sleep(DELAYS[min(attempt - 1, len(DELAYS) - 1)])
    raise AssertionError("unreachable")  # pragma: no cover


def best_effort(operation: Callable[[], object], what: str) -> None:
    """``operation()`` with `with_retries`; a storage error left after the tries is a `CheckpointWarning`.

    For the bookkeeping around a published checkpoint (the ``checkpoint`` index,
    deleting those beyond ``max_to_keep``, sweeping stale temporaries): the
    directory listing stays the truth, so a failure there must not fail the
    save -- nor leave the chief raising where the other workers wait for it.
    """
    try:
        with_retries(operation, what)
    except OSError as exc:
        warnings.warn(f"{what}: {first_line(exc, limit=300)}; left as it is (the directory listing decides)",
                      CheckpointWarning, stacklevel=2)
