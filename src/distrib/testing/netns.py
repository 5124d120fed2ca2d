"""Namespace hosts: several "machines" on one Linux box, for multi-host tests.

`NamespaceHosts` creates ``n`` network namespaces ("hosts") plus one
"switch" namespace holding a bridge; each host gets a veth pair whose other
end is a port of that bridge and an address ``10.213.<net>.<i+1>/24``. The
test range lives only inside these namespaces: nothing is added to the root
namespace, so no traffic can leak to a real network. Names carry this
process's pid and a counter, so parallel runs never collide, and everything
is removed on exit (context manager, ``atexit`` and a ``finally`` when set-up
fails half way), including every process still running in a host.

Link faults are applied on a host's veth end: `cut` / `restore` (link down
and up) and `impair` (``tc netem`` delay and loss, where the kernel has
netem). With ``wire=True`` the hosts are joined instead by a user-space hub
(`distrib.testing.wire`) through a TAP device each, which adds
``delay_ms`` and ``loss_percent`` itself: it works on kernels without netem.

Needs root and ``ip`` (iproute2); `namespaces_available` tells whether this
machine can create a namespace, so tests can skip with a reason.

Example:
    >>> with NamespaceHosts(2) as hosts:                       # doctest: +SKIP
    ...     hosts.address(1)
    '10.213.7.2'
    ...     hosts.run(1, ["ping", "-c", "1", hosts.address(0)]).returncode
    0
"""
from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
from typing import Dict, List, Optional, Sequence, Tuple

from distrib import hooks
from distrib.errors import DistribError

__all__ = ["NamespaceError", "NamespaceHosts", "namespaces_available"]

_IP_TIMEOUT = 20.0
_counter = itertools.count()
_live: Dict[int, "NamespaceHosts"] = {}
_live_lock = threading.Lock()


class NamespaceError(DistribError, RuntimeError):
    """Creating or changing a namespace host failed."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT)
    if check and proc.returncode != 0:
        raise NamespaceError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip() or proc.returncode}")
    return proc


def namespaces_available() -> Optional[str]:
    """``None`` if this process can create network namespaces, else the reason it cannot."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    name = f"dprobe{os.getpid()}x{next(_counter)}"
    try:
        made = _ip("netns", "add", name, check=False)
        if made.returncode != 0:
            return f"cannot create a network namespace: {made.stderr.strip()}"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot create a network namespace: {exc}"
    finally:
        _ip("netns", "del", name, check=False)
    return None


def _cleanup_all() -> None:
    with _live_lock:
        hosts = list(_live.values())
    for item in hosts:
        item.close()


hooks.at_exit(_cleanup_all)


class NamespaceHosts:
    """``n`` namespace hosts on a private bridge (see the module docstring).

    Args:
        n: number of hosts (1..200).
        ipv6: also give host ``i`` the address ``fd13:213:<net>::<i+1>/64``.
        wire: join the hosts with the user-space hub instead of a bridge.
        delay_ms, loss_percent: what the hub adds to every frame (``wire=True`` only).
        partition: ``(host, port, file)``: once ``file`` exists, the hub drops every TCP frame
            ``host`` sends except to ``port`` (``wire=True`` only; see `distrib.testing.wire`).
    """

    def __init__(self, n: int, *, ipv6: bool = False, wire: bool = False,
                 delay_ms: float = 0.0, loss_percent: float = 0.0,
                 partition: Optional[Tuple[int, int, str]] = None) -> None:
        if not 1 <= n <= 200:
            raise ValueError(f"NamespaceHosts: n must be in 1..200, got {n}")
        self.n = n
        uid = f"{os.getpid() % 100000}x{next(_counter)}"
        self._net = (os.getpid() + next(_counter)) % 250 + 1
        self._switch = f"dsw{uid}"
        self.names: List[str] = [f"dh{uid}n{i}" for i in range(n)]
        self._veths = [(f"dv{uid}h{i}", f"dv{uid}s{i}") for i in range(n)]
        self._ipv6 = ipv6
        self._wire = wire
        self._hub: Optional[subprocess.Popen] = None
        self._partition = partition
        self._closed = False
        self._lock = threading.Lock()
        with _live_lock:
            _live[id(self)] = self
        try:
            if wire:
                self._create_wired(delay_ms, loss_percent)
            else:
                self._create()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ set-up
    def _create(self) -> None:
        _ip("netns", "add", self._switch)
        sw = ["-n", self._switch]
        _ip(*sw, "link", "add", "br0", "type", "bridge")
        _ip(*sw, "link", "set", "br0", "up")
        _ip(*sw, "link", "set", "lo", "up")
        for i, name in enumerate(self.names):
            host_end, switch_end = self._veths[i]
            _ip("netns", "add", name)
            # Created directly inside the host namespace; the peer is moved to the switch.
            _ip("-n", name, "link", "add", host_end, "type", "veth", "peer", "name", switch_end,
                "netns", self._switch)
            _ip(*sw, "link", "set", switch_end, "master", "br0")
            _ip(*sw, "link", "set", switch_end, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "addr", "add", f"{self.address(i)}/24", "dev", host_end)
            if self._ipv6:
                _ip("-n", name, "addr", "add", f"{self.address6(i)}/64", "dev", host_end, "nodad")
            _ip("-n", name, "link", "set", host_end, "up")

    def _create_wired(self, delay_ms: float, loss_percent: float) -> None:
        taps = []
        for i, name in enumerate(self.names):
            tap = self._veths[i][0]
            _ip("netns", "add", name)
            _ip("-n", name, "tuntap", "add", "dev", tap, "mode", "tap")
            _ip("-n", name, "link", "set", tap, "mtu", "9000")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "addr", "add", f"{self.address(i)}/24", "dev", tap)
            if self._ipv6:
                _ip("-n", name, "addr", "add", f"{self.address6(i)}/64", "dev", tap, "nodad")
            _ip("-n", name, "link", "set", tap, "up")
            taps.append(f"{name}:{tap}")
        self._hub = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "wire.py"), "--delay-ms", str(delay_ms),
             "--loss-percent", str(loss_percent),
             *(["--partition", ":".join(map(str, self._partition))] if self._partition else []), *taps],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert self._hub.stdout is not None
        line = self._hub.stdout.readline()  # the hub prints "ready" or exits with an error
        if line.strip() != "ready":
            self._hub.kill()
            _, err = self._hub.communicate(timeout=_IP_TIMEOUT)
            raise NamespaceError(f"the user-space wire did not start: {err.strip()[-500:]}")

    # ------------------------------------------------------------ queries
    def address(self, i: int) -> str:
        """Host ``i``'s IPv4 address."""
        return f"10.213.{self._net}.{i + 1}"

    def address6(self, i: int) -> str:
        """Host ``i``'s IPv6 address (only configured with ``ipv6=True``)."""
        return f"fd13:213:{self._net:x}::{i + 1:x}"

    def interface(self, i: int) -> str:
        """Name of host ``i``'s network interface (inside its namespace)."""
        return self._veths[i][0]

    def command(self, i: int, argv: Sequence[str]) -> List[str]:
        """``argv`` wrapped to run inside host ``i``."""
        return ["ip", "netns", "exec", self.names[i], *argv]

    # ------------------------------------------------------------ running
    def popen(self, i: int, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start ``argv`` inside host ``i`` in a new session (see `kill_host`)."""
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(self.command(i, argv), **kwargs)

    def run(self, i: int, argv: Sequence[str], timeout: float = 60.0,
            **kwargs) -> subprocess.CompletedProcess:
        """Run ``argv`` inside host ``i`` to completion (bounded by ``timeout``)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(i, argv), timeout=timeout, **kwargs)

    def pids(self, i: int) -> List[int]:
        """Processes running inside host ``i``."""
        proc = _ip("netns", "pids", self.names[i], check=False)
        return [int(p) for p in proc.stdout.split() if p.isdigit()]

    def kill_host(self, i: int, signum: int = signal.SIGKILL) -> List[int]:
        """Send ``signum`` to every process inside host ``i`` (a whole machine lost)."""
        pids = self.pids(i)
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        return pids

    # ------------------------------------------------------------ faults
    def cut(self, i: int) -> None:
        """Take host ``i``'s link down: it can reach nobody and nobody reaches it."""
        if self._wire:
            _ip("-n", self.names[i], "link", "set", self._veths[i][0], "down")
        else:
            _ip("-n", self._switch, "link", "set", self._veths[i][1], "down")

    def restore(self, i: int) -> None:
        """Bring host ``i``'s link back up."""
        if self._wire:
            _ip("-n", self.names[i], "link", "set", self._veths[i][0], "up")
        else:
            _ip("-n", self._switch, "link", "set", self._veths[i][1], "up")

    def impair(self, i: int, delay_ms: float = 0.0, loss_percent: float = 0.0) -> None:
        """Add ``delay_ms`` latency and ``loss_percent`` loss to what host ``i`` sends (tc netem)."""
        args = ["tc", "qdisc", "replace", "dev", self._veths[i][0], "root", "netem"]
        if delay_ms:
            args += ["delay", f"{delay_ms}ms"]
        if loss_percent:
            args += ["loss", f"{loss_percent}%"]
        proc = self.run(i, args, timeout=_IP_TIMEOUT)
        if proc.returncode != 0:
            raise NamespaceError(f"`{' '.join(args)}` in {self.names[i]} failed: {proc.stderr.strip()}")

    # ------------------------------------------------------------ teardown
    def close(self) -> None:
        """Kill every process in the hosts and delete every namespace (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for i in range(len(self.names)):
            self.kill_host(i)
        if self._hub is not None:
            self._hub.kill()
            self._hub.communicate(timeout=_IP_TIMEOUT)
        for name in [*self.names, self._switch]:
            _ip("netns", "del", name, check=False)  # deleting a namespace removes its veths
        with _live_lock:
            _live.pop(id(self), None)

    def __enter__(self) -> "NamespaceHosts":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
