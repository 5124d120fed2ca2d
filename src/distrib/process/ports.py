"""Free TCP ports for the tasks of a launch, chosen at run time.

The operating system picks each port (bind to port 0). All ports of one
request are held open together, so they are distinct; the process also
remembers the ports it handed out recently and does not give them out again,
so a restarted group (or a second launch from the same process) gets fresh
ones. A port can still be taken by another program between the moment it is
released here and the moment the task binds it; Linux makes this unlikely by
giving ``bind(0)`` and outgoing connections different halves of the port range.

``DISTRIB_PORT_RANGE=LOW-HIGH`` makes the ports come from that range instead
(each checked free by binding it): for a firewall that opens only some ports,
and for the test suite, whose parallel processes take disjoint ranges below
the kernel's ephemeral range (``ip_local_port_range``), so neither each other
nor any program's ``bind(0)`` or outgoing connection can take a port between
its choice and its use.

Example:
    >>> a, b = reserve_ports(2)
    >>> a != b
    True
"""
from __future__ import annotations

import collections
import errno
import os
import random
import socket
import threading
from typing import Deque, List, Mapping, Optional, Set, Tuple

__all__ = ["free_port", "reserve_ports", "port_range", "PORT_RANGE_ENV"]

PORT_RANGE_ENV = "DISTRIB_PORT_RANGE"

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
        OSError: ``host`` cannot be bound, or too few ports are free (one line naming the host).
    """
    if count < 0:
        raise ValueError(f"reserve_ports: count must be >= 0, got {count}")
    span = port_range()
    with _recent_lock:
        recent: Set[int] = set(_recent)
        if span is None:  # the kernel picks each; a recent one is held and skipped
            candidates: List[int] = [0] * (count + _RECENT_LIMIT + 1)
        else:
            candidates = [p for p in range(span[0], span[1] + 1) if p not in recent]
            random.SystemRandom().shuffle(candidates)
        ports = _bind_distinct(count, host, candidates, recent)
        if len(ports) < count:
            where = "" if span is None else f" in {PORT_RANGE_ENV}={span[0]}-{span[1]} (found {len(ports)})"
            raise OSError(f"cannot find {count} {'unused' if span is None else 'free'} ports on host {host!r}{where}")
        _recent.extend(ports)
    return ports


def _bind_distinct(count: int, host: str, candidates: List[int], recent: Set[int]) -> List[int]:
    """Up to ``count`` ports that bind on ``host``, trying ``candidates`` in order (0: the kernel's choice).

    Every socket stays bound until all are picked, so the kernel cannot hand
    out the same port twice within one request.
    """
    held: List[socket.socket] = []
    ports: List[int] = []
    try:
        for wanted in candidates:
            if len(ports) == count:
                break
            sock = socket.socket(_family(host), socket.SOCK_STREAM)
            try:
                sock.bind((host, wanted))
            except OSError as exc:
                sock.close()
                if wanted and exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    continue  # taken, or reserved for privileged programs
                raise OSError(f"cannot bind a free port on host {host!r}: {exc}") from None
            held.append(sock)
            port = sock.getsockname()[1]
            if port not in recent:
                ports.append(port)
    finally:
        for sock in held:
            sock.close()
    return ports


def port_range(environ: Optional[Mapping[str, str]] = None) -> Optional[Tuple[int, int]]:
    """``(low, high)`` from ``DISTRIB_PORT_RANGE`` (inclusive), or None where it is unset or empty.

    Raises:
        ValueError: not ``LOW-HIGH`` with ``1 <= LOW <= HIGH <= 65535`` (one line naming the variable).

    Example:
        >>> port_range({"DISTRIB_PORT_RANGE": "20000-20999"})
        (20000, 20999)
    """
    text = (os.environ if environ is None else environ).get(PORT_RANGE_ENV, "").strip()
    if not text:
        return None
    low, sep, high = text.partition("-")
    if sep and low.strip().isdigit() and high.strip().isdigit() and 1 <= int(low) <= int(high) <= 65535:
        return int(low), int(high)
    raise ValueError(f"{PORT_RANGE_ENV}={text!r} is not a port range: write LOW-HIGH, for example 20000-20999")


def free_port(host: str = "127.0.0.1") -> int:
    """Return one free TCP port on ``host`` (see `reserve_ports`)."""
    return reserve_ports(1, host)[0]
