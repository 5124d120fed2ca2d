"""Rendezvous: all tasks meet at the chief's address before training starts.

The chief (replica 0) hosts a `torch.distributed.TCPStore` on the port its
TF_CONFIG entry gives; every other task connects to it. Each task announces
itself; while some are missing, every present task logs once which tasks it
is waiting for and where, and after ``timeout`` seconds raises
`RendezvousTimeoutError` naming them.

Under torchrun the elastic agent already hosts a store at
``MASTER_ADDR:MASTER_PORT`` (``TORCHELASTIC_USE_AGENT_STORE=True``): there
rank 0 connects to it as a client instead of trying to listen on a port the
agent holds (which made c10d print a "failed to bind" error line); since that
store outlives a restart, the caller keeps each attempt's keys under a prefix
of its own (`distrib.comm.attempt`).

``distrib launch --elastic`` hosts the store itself, at the chief's address
(`distrib.launch.job_store`, ``DISTRIB_LAUNCHER_STORE=1``), so that it
outlives the chief: there the chief connects to it as a client too.

A task whose rank already joined the store it reaches is a restarted task
meeting the previous attempt's chief (after a multi-node restart, nodes
restart independently); it lets that store go and keeps waiting for the new
chief.

Example log line (worker 0 started first, worker 1 not yet):
    distrib: worker 0 waiting for worker 1 (127.0.0.1:23456) to join (timeout 60s)
"""
from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from datetime import timedelta
from typing import Callable, List, Optional

import torch.distributed as dist

from distrib.comm.attempt import attempt_namespace
from distrib.comm.auth_handshake import AuthenticationError, ProtocolError
from distrib.comm.auth_store import connect_client, host_store, secret_mismatches
from distrib.comm.errors import PortInUseError, RendezvousTimeoutError, first_line
from distrib.process.task_env import LAUNCHER_STORE_ENV

__all__ = ["connect_store", "store_client", "wait_for_all"]

log = logging.getLogger("distrib.comm")
_POLL_SECONDS = 0.05
_QUIET_SECONDS = 1.0  # ordinary start-up skew; say nothing before this
#: A chief address that accepts connections but does not answer as a store within
#: this many seconds is another program's port, not a slow chief (a store answers in ms).
_FOREIGN_SECONDS = 8.0


def _agent_hosts_store(port: int) -> bool:
    """Whether torchrun's elastic agent already serves the store on ``port``."""
    env = os.environ
    return env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true" and \
        env.get("MASTER_PORT") == str(port)


def store_client(host: str, port: int, world_size: int, timeout: float) -> dist.Store:
    """One connection attempt to the job's store: authenticated when a job secret is set.

    torchrun's agent store is torch's own `TCPStore`, which knows no
    authentication: there the connection is a plain store client.
    """
    if _agent_hosts_store(port):
        return dist.TCPStore(host, port, world_size, is_master=False, timeout=timedelta(seconds=timeout))
    return connect_client(host, port, world_size, timeout)


def _launcher_hosts_store() -> bool:
    """Whether ``distrib launch --elastic`` hosts the job's store at the chief's address (`LAUNCHER_STORE_ENV`)."""
    return os.environ.get(LAUNCHER_STORE_ENV) == "1"


def connect_store(host: str, port: int, rank: int, world_size: int, timeout: float,
                  describe: Callable[[int], str]) -> dist.Store:
    """Host the store (rank 0, unless a launcher or torchrun's agent hosts it) or connect to it, within
    ``timeout`` seconds."""
    if rank == 0 and not _agent_hosts_store(port) and not _launcher_hosts_store():
        try:
            return host_store(host, port, world_size, timeout)
        except Exception as exc:  # address in use, unresolvable host
            if _address_in_use(exc):
                raise PortInUseError(
                    f"{describe(0)} cannot listen on {host}:{port}: the port is already in use by "
                    f"another program; free it or give the chief another port") from None
            raise RendezvousTimeoutError(
                f"{describe(0)} could not listen on {host}:{port}: {first_line(exc)}") from None
    return _connect_client(host, port, rank, world_size, timeout, describe)


def _connect_client(host: str, port: int, rank: int, world_size: int, timeout: float,
                    describe: Callable[[int], str]) -> dist.Store:
    start = time.monotonic()
    deadline = start + timeout
    announced = False
    silent_since: Optional[float] = None  # when the address began accepting without answering
    last_failure = ""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if last_failure:
                raise RendezvousTimeoutError(f"{describe(rank)} gave up after {timeout:g}s: {last_failure}")
            raise RendezvousTimeoutError(
                f"{describe(rank)} gave up after {timeout:g}s: the chief {describe(0)} never "
                f"accepted connections (is it running? is TF_CONFIG's address right?)")
        # Probe with a plain socket first: the store client's own retries back off for
        # hundreds of milliseconds, which every worker that starts before its chief would pay.
        if _accepts(host, port):
            try:
                store = _answering_client(host, port, world_size, min(2.0, remaining),
                                          min(_FOREIGN_SECONDS, max(remaining, 0.1)))
                if not _joined_before(store, rank):
                    return store
                del store  # a previous attempt's chief (multi-node restart): wait for the new one
            except AuthenticationError as exc:
                raise RendezvousTimeoutError(f"{describe(rank)}: {exc}") from None
            except ProtocolError as exc:  # a distrib store that shed this handshake: try again
                last_failure = first_line(exc)
                silent_since = None
            except (_NoAnswer, TimeoutError) as exc:
                silent_since = silent_since or time.monotonic()
                if isinstance(exc, _NoAnswer) or time.monotonic() - silent_since >= _FOREIGN_SECONDS:
                    raise PortInUseError(
                        f"{describe(rank)}: the chief's address {host}:{port} accepts connections "
                        f"but does not answer as distrib's store (for {_FOREIGN_SECONDS:g}s): "
                        f"another program probably holds the port, so the chief {describe(0)} "
                        f"cannot listen there; free it or give the chief another port") from None
            except Exception:
                silent_since = None
        if not announced and time.monotonic() - start >= min(_QUIET_SECONDS, timeout / 2):
            log.warning("distrib: %s waiting for the chief %s to accept connections (timeout %gs)",
                        describe(rank), describe(0), timeout)
            announced = True
        time.sleep(_POLL_SECONDS / 2)  # poll: nothing notifies us when the chief starts listening


def _joined_before(store: dist.Store, rank: int) -> bool:
    """Whether ``rank`` already joined this attempt's keys: the store belongs to an attempt that is ending."""
    return bool(store.check([f"{attempt_namespace()}/distrib/joined/{rank}"]))


class _NoAnswer(Exception):
    """The address accepted a connection but no store answered in time."""


def _answering_client(host: str, port: int, world_size: int, timeout: float, wait: float) -> dist.Store:
    """`store_client`, given up after ``wait`` seconds.

    torch's store client waits for ever for a reply from a peer that accepted
    the connection and stays silent (another program listening on the port),
    so the attempt runs on a daemon thread; one that never returns is left
    behind with its socket, and the task fails with `PortInUseError`.
    """
    outcome: dict = {}

    def attempt() -> None:
        try:
            outcome["store"] = store_client(host, port, world_size, timeout)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=attempt, name="distrib-store-connect", daemon=True)
    thread.start()
    thread.join(wait)
    if thread.is_alive():
        raise _NoAnswer()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["store"]


def _address_in_use(exc: BaseException) -> bool:
    """Whether listening failed because the address is taken (``EADDRINUSE``; torch words it in text)."""
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return True
    text = str(exc)
    return "Address already in use" in text or "EADDRINUSE" in text


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_for_all(store: dist.Store, rank: int, world_size: int, timeout: float,
                 describe: Callable[[int], str]) -> None:
    """Announce this task and block until all ``world_size`` tasks have; name the missing ones."""
    store.set(f"distrib/joined/{rank}", "1")
    store.add("distrib/joined_count", 1)
    start = time.monotonic()
    deadline = start + timeout
    announced = False
    while store.add("distrib/joined_count", 0) < world_size:
        missing = _missing(store, world_size)
        if time.monotonic() >= deadline:
            names = ", ".join(describe(r) for r in missing)
            raise RendezvousTimeoutError(
                f"timed out after {timeout:g}s waiting for {names} to join "
                f"({world_size - len(missing)} of {world_size} tasks arrived){_mismatch_note()}")
        if not announced and missing and time.monotonic() - start >= min(_QUIET_SECONDS, timeout / 2):
            log.warning("distrib: %s waiting for %s to join (timeout %gs)", describe(rank),
                        ", ".join(describe(r) for r in missing), timeout)
            announced = True
        time.sleep(_POLL_SECONDS)  # poll: the store offers no wait-for-count primitive


def _missing(store: dist.Store, world_size: int) -> List[int]:
    return [r for r in range(world_size) if not store.check([f"distrib/joined/{r}"])]


def _mismatch_note() -> str:
    seen = secret_mismatches()
    if not seen:
        return ""
    return f"; job secret mismatch: {', '.join(sorted(set(seen))[:4])} proved a different job secret"
