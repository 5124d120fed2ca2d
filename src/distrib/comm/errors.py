"""Errors raised when replicas cannot talk to each other. Each names the task."""
from __future__ import annotations

from typing import Optional

from distrib import errors
from distrib.errors import DistribError

__all__ = ["first_line", "last_error_line", "DistribCommError", "RendezvousTimeoutError", "WorkerLostError", "CollectiveTimeoutError",
           "PortInUseError"]


class DistribCommError(DistribError, RuntimeError):
    """Base of distrib's communication errors."""


class RendezvousTimeoutError(DistribCommError):
    """Some tasks never joined the job within the timeout."""


class PortInUseError(DistribCommError):
    """The chief's rendezvous port is held by another program (named on the chief and on every task)."""


class WorkerLostError(DistribCommError):
    """A task died (or its connection broke) while the job was running."""


class CollectiveTimeoutError(DistribCommError):
    """A collective did not complete in time although every task seems alive."""


def last_error_line(text: str) -> Optional[str]:
    """The last line of a process's standard error that reports an error (else its last line), or None.

    Example:
        >>> last_error_line("warning: slow\\n[rank1]: ValueError: boom\\ndistrib: waiting\\n")
        '[rank1]: ValueError: boom'
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors_ = [line for line in lines if "Error" in line or "error:" in line or "Exception" in line]
    chosen = (errors_ or lines)[-1:] or [None]
    return chosen[0][:300] if chosen[0] else None


def first_line(exc: BaseException) -> str:
    """The useful part of a backend error: no source location, no advice boilerplate (`distrib.errors.first_line`)."""
    return errors.first_line(exc, limit=300, backend=True)
