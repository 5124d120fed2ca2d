"""Rendezvous: all tasks meet at the chief's address before training starts.

The chief (replica 0) hosts a `torch.distributed.TCPStore` on the port its
TF_CONFIG entry gives; every other task connects to it. Each task announces
itself; while some are missing, every present task logs once which tasks it
is waiting for and where, and after ``timeout`` seconds raises
`RendezvousTimeoutError` naming them.

Example log line (worker 0 started first, worker 1 not yet):
    distrib: worker 0 waiting for worker 1 (127.0.0.1:23456) to join (timeout 60s)
"""
from __future__ import annotations

import logging
import socket
import time
from typing import Callable, List

import torch.distributed as dist

from distrib.comm.auth_handshake import AuthenticationError
from distrib.comm.auth_store import connect_client, host_store
from distrib.comm.errors import RendezvousTimeoutError, first_line

__all__ = ["connect_store", "wait_for_all"]

log = logging.getLogger("distrib.comm")
_POLL_SECONDS = 0.05
_QUIET_SECONDS = 1.0  # ordinary start-up skew; say nothing before this


def connect_store(host: str, port: int, rank: int, world_size: int, timeout: float,
                  describe: Callable[[int], str]) -> dist.Store:
    """Host the store (rank 0) or connect to it, within ``timeout`` seconds."""
    if rank == 0:
        try:
            return host_store(host, port, world_size, timeout)
        except Exception as exc:  # address in use, unresolvable host
            raise RendezvousTimeoutError(
                f"{describe(0)} could not listen on {host}:{port}: {first_line(exc)}") from None
    start = time.monotonic()
    deadline = start + timeout
    announced = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RendezvousTimeoutError(
                f"{describe(rank)} gave up after {timeout:g}s: the chief {describe(0)} never "
                f"accepted connections (is it running? is TF_CONFIG's address right?)")
        # Probe with a plain socket first: the store client's own retries back off for
        # hundreds of milliseconds, which every worker that starts before its chief would pay.
        if _accepts(host, port):
            try:
                return connect_client(host, port, world_size, min(2.0, remaining))
            except AuthenticationError as exc:
                raise RendezvousTimeoutError(f"{describe(rank)}: {exc}") from None
            except Exception:
                pass
        if not announced and time.monotonic() - start >= min(_QUIET_SECONDS, timeout / 2):
            log.warning("distrib: %s waiting for the chief %s to accept connections (timeout %gs)",
                        describe(rank), describe(0), timeout)
            announced = True
        time.sleep(_POLL_SECONDS / 2)  # poll: nothing notifies us when the chief starts listening


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
                f"({world_size - len(missing)} of {world_size} tasks arrived)")
        if not announced and missing and time.monotonic() - start >= min(_QUIET_SECONDS, timeout / 2):
            log.warning("distrib: %s waiting for %s to join (timeout %gs)", describe(rank),
                        ", ".join(describe(r) for r in missing), timeout)
            announced = True
        time.sleep(_POLL_SECONDS)  # poll: the store offers no wait-for-count primitive


def _missing(store: dist.Store, world_size: int) -> List[int]:
    return [r for r in range(world_size) if not store.check([f"distrib/joined/{r}"])]
