"""Free TCP ports for the tasks of a launch, chosen at run time.

The operating system picks each port (bind to port 0). All ports of one
request are held open together, so they are distinct; the process also
remembers the ports it handed out recently and does not give them out again,
so a restarted group (or a second launch from the same process) gets fresh
ones. A port can still be taken by another program between the moment it is
released here and the moment the task binds it; Linux makes this unlikely by
giving ``bind(0)`` and outgoing connections different halves of the port range.

Example:
    >>> a, b = reserve_ports(2)
    >>> a != b
    True
"""
from __future__ import annotations

import collections
import socket
import threading
from typing import Deque, List, Set

__all__ = ["free_port", "reserve_ports"]

_RECENT_LIMIT = 256
_recent: Deque[int] = collections.deque(maxlen=_RECENT_LIMIT)
_recent_lock = threading.Lock()


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def reserve_ports(count: int, host: str = "127.0.0.1") -> List[int]:
    """Return ``count`` distinct free TCP ports on ``host``.

    Args:
        count: how many ports to pick (``>= 0``).
        host: the address the tasks will bind (an IPv4 or IPv6 literal, or a name).

    Raises:
        OSError: ``host`` cannot be bound (one line naming the host).
    """
    if count < 0:
        raise ValueError(f"reserve_ports: count must be >= 0, got {count}")
    held: List[socket.socket] = []
    ports: List[int] = []
    with _recent_lock:
        recent: Set[int] = set(_recent)
        try:
            # Every socket stays bound until all are picked, so the kernel
            # cannot hand out the same port twice within one request.
            while len(ports) < count:
                sock = socket.socket(_family(host), socket.SOCK_STREAM)
                held.append(sock)
                try:
                    sock.bind((host, 0))
                except OSError as exc:
                    raise OSError(f"cannot bind a free port on host {host!r}: {exc}") from None
                port = sock.getsockname()[1]
                if port in recent:
                    continue
                ports.append(port)
                if len(held) > count + _RECENT_LIMIT:
                    raise OSError(f"cannot find {count} unused ports on host {host!r}")
        finally:
            for sock in held:
                sock.close()
        _recent.extend(ports)
    return ports


def free_port(host: str = "127.0.0.1") -> int:
    """Return one free TCP port on ``host`` (see `reserve_ports`)."""
    return reserve_ports(1, host)[0]
