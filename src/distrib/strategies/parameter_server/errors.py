"""Errors of parameter-server training; each names the task it is about.

Example:
    >>> UnavailableError("ps 0 (127.0.0.1:2223) is unavailable: connection reset", task="ps 0")
    UnavailableError('ps 0 (127.0.0.1:2223) is unavailable: connection reset')
"""
from __future__ import annotations

from typing import Optional

from distrib.comm.errors import DistribCommError
from distrib.errors import DistribError

__all__ = ["UnavailableError", "CancelledError", "RemoteError", "PeerError", "ChannelError",
           "ChannelConfigError"]


class UnavailableError(DistribCommError):
    """A task of the cluster cannot be reached (TensorFlow's ``tf.errors.UnavailableError``).

    Raised by ``join()``, ``done()``, ``schedule()`` and ``RemoteValue.fetch()``
    when a parameter server is lost (training cannot go on: restart the job
    from a checkpoint), or when every worker is lost.

    Attributes:
        task: the lost task, e.g. ``"ps 0"`` (``None`` when several are).
    """

    def __init__(self, message: str, task: Optional[str] = None) -> None:
        super().__init__(message)
        self.task = task


class CancelledError(DistribCommError):
    """A scheduled function never ran because an earlier one failed (``tf.errors.CancelledError``)."""


class RemoteError(DistribError, RuntimeError):
    """Holds the traceback of an exception raised on a worker; set as the ``__cause__`` of the
    re-raised exception so the remote stack is shown."""


class PeerError(DistribError, RuntimeError):
    """A handler raised on the called task (not a transport failure): ``"on ps 0: KeyError: ..."``."""


class ChannelError(DistribError, ConnectionError):
    """A call on the parameter-server channel failed in transport (or was refused).

    Attributes:
        code: the gRPC status name, e.g. ``"UNAVAILABLE"``, ``"DEADLINE_EXCEEDED"``, ``"UNAUTHENTICATED"``.
    """

    def __init__(self, message: str, code: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.code = code


class ChannelConfigError(DistribError, ValueError):
    """The channel's TLS settings cannot be used (a missing or unreadable file, half a key pair)."""
