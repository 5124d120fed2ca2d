"""Heartbeats through the rendezvous store, to name a task that died.

Every task bumps its own counter in the chief's store every ``interval``
seconds from a daemon thread (on its own store connection). When a
collective fails, `HealthMonitor.find_lost` watches the counters for a
couple of intervals: a task whose counter stopped is the one that died; if
the store itself is unreachable, the chief (which hosts it) is gone.

If a peer stops beating while this task is blocked somewhere the collective
timeout cannot reach, the watchdog ends the process after ``timeout`` with a
line that names the peer, so no task ever hangs silently.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from datetime import timedelta
from typing import Callable, Dict, List, Optional, Set

import torch.distributed as dist

from distrib.comm.auth_handshake import AuthenticationError
from distrib.comm.errors import RendezvousTimeoutError, first_line
from distrib.comm.rendezvous import store_client

__all__ = ["HealthMonitor"]

log = logging.getLogger("distrib.comm")
_FIRST_RETRY_SECONDS = 0.05
_MAX_RETRY_SECONDS = 2.0

#: Exit status of a task the watchdog ends because a peer vanished.
LOST_PEER_EXIT_CODE = 70


class HealthMonitor:
    """Beats for this task and watches the others; see module docstring."""

    def __init__(self, host: str, port: int, rank: int, world_size: int, timeout: float,
                 describe: Callable[[int], str], interval: Optional[float] = None,
                 namespace: str = "") -> None:
        self.rank = rank
        self.world_size = world_size
        self.timeout = timeout
        self.interval = interval if interval is not None else max(0.2, min(1.0, timeout / 10))
        self._describe = describe
        store = _connect_with_backoff(host, port, world_size, timeout, describe(rank),
                                      timedelta(seconds=max(1.0, self.interval * 2)))
        self._raw_store = store  # a Python Store (AuthStore) must outlive the PrefixStore around it
        self._store = dist.PrefixStore(namespace, store) if namespace else store
        self._last_value: Dict[int, int] = {}
        self._last_change: Dict[int, float] = {}
        self._departed: Set[int] = set()
        self._stop = threading.Event()
        self._store_lost_since: Optional[float] = None
        self._last_contact = time.monotonic()
        self._store_silent = False  # the outage is a chief that does not answer, not one that is gone
        self.busy_since: Optional[float] = None  # set while the owner waits in a collective
        self._thread = threading.Thread(target=self._run, name="distrib-heartbeat", daemon=True)
        self._thread.start()

    def close(self, wait: bool = True) -> None:
        """Stop beating; returns once the beating thread has left the store alone (``wait``)."""
        self._stop.set()
        if wait and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self.interval * 4 + 2)

    def release(self) -> None:
        """Drop the store connection (after `close`)."""
        if not self._thread.is_alive():
            self._store = None

    # ----------------------------------------------------------- beating
    def _run(self) -> None:
        key = f"distrib/hb/{self.rank}"
        while not self._stop.wait(self.interval):
            try:
                self._store.add(key, 1)
                self._observe()
                self._store_lost_since = None
                self._last_contact = time.monotonic()
            except Exception as exc:
                now = time.monotonic()
                if self._store_lost_since is None:
                    self._store_lost_since = now
                    self._store_silent = _is_silence(exc)
                if now - self._last_contact > self.timeout:
                    self._give_up(f"the chief {self._describe(0)} {self._chief_state()} for "
                                  f"{self.timeout:g}s")
            else:
                self._check_watchdog()

    def _observe(self) -> None:
        keys = [f"distrib/hb/{r}" for r in range(self.world_size)]
        present = [k for k in keys if self._store.check([k])]
        values = self._store.multi_get(present) if present else []
        now = time.monotonic()
        for k, v in zip(present, values):
            r = int(k.rsplit("/", 1)[1])
            val = int(v)
            if self._last_value.get(r) != val:
                self._last_value[r] = val
                self._last_change[r] = now
        for r in range(self.world_size):
            self._last_change.setdefault(r, now)

    def _chief_state(self) -> str:
        if self._store_silent:
            return "is not responding (stopped or hung: its store accepts but does not answer)"
        return "is gone (its store refused or dropped the connection: it exited or was killed)"

    def forget(self, ranks: "List[int]") -> None:
        """Stop watching ``ranks``: they left the job on purpose (an elastic resize)."""
        self._departed.update(ranks)

    def remember(self, ranks: "List[int]") -> None:
        """Watch ``ranks`` again: they joined the job (an elastic resize)."""
        now = time.monotonic()
        for r in ranks:
            self._departed.discard(r)
            self._last_change[r] = now

    def stale_peers(self, threshold: float) -> List[int]:
        now = time.monotonic()
        return [r for r, t in sorted(self._last_change.items())
                if r != self.rank and r not in self._departed and now - t > threshold]

    def _check_watchdog(self) -> None:
        stale = self.stale_peers(self.timeout)
        if stale and self.busy_since is not None and time.monotonic() - self.busy_since > self.timeout:
            names = ", ".join(self._describe(r) for r in stale)
            self._give_up(f"{names} stopped responding (stopped, hung or exited) {self.timeout:g}s ago while "
                          f"{self._describe(self.rank)} was waiting for it")

    def _give_up(self, why: str) -> None:
        sys.stderr.write(f"distrib: error: {why}; exiting\n")
        sys.stderr.flush()
        os._exit(LOST_PEER_EXIT_CODE)

    # ----------------------------------------------------------- naming
    def find_lost(self, wait: Optional[float] = None, silent: bool = False) -> List[str]:
        """Describe the tasks that look dead or stopped, watching up to ``wait`` seconds.

        ``silent``: the failed operation timed out (rather than losing its
        connection), so a peer whose heartbeat stopped is named as not
        responding -- stopped (SIGSTOP) or hung -- rather than gone.
        """
        wait = wait if wait is not None else self.interval * 3 + 0.5
        deadline = time.monotonic() + wait
        threshold = self.interval * 2.5
        while True:
            if self._store_lost_since is not None and self.rank != 0:
                return [f"the chief {self._describe(0)} {self._chief_state()}"]
            stale = self.stale_peers(threshold)
            if stale:
                state = "is not responding (stopped or hung)" if silent else "is gone"
                return [f"{self._describe(r)} {state}{departure_note(r)}" for r in stale]
            if time.monotonic() >= deadline:
                return []
            time.sleep(self.interval / 4)  # poll: heartbeats arrive on their own thread


#: Who can tell why a rank left: ``note(rank) -> its last error line or None`` (the process that
#: started local replicas reads their standard error; see `add_departure_note`).
_DEPARTURE_NOTES: List[Callable[[int], Optional[str]]] = []


def add_departure_note(note: Callable[[int], Optional[str]]) -> None:
    """Register ``note(rank)``: the last error line of a departed rank, when this process can read it."""
    _DEPARTURE_NOTES.append(note)


def departure_note(rank: int) -> str:
    """``": <its last error line>"`` for ``rank`` if a registered note knows it, else ``""``."""
    for note in _DEPARTURE_NOTES:
        try:
            line = note(rank)
        except Exception:  # noqa: BLE001 - a reason is a courtesy; naming the rank is what counts
            line = None
        if line:
            return f" (its last error line: {line[:300]})"
    return ""


def _is_silence(exc: BaseException) -> bool:
    """True if ``exc`` is a store call that timed out (a peer that is there but silent)."""
    text = str(exc).lower()
    return "timed out" in text or "timeout" in text


def _connect_with_backoff(host: str, port: int, world_size: int, timeout: float, me: str,
                          op_timeout: timedelta) -> dist.Store:
    """A client of the chief's store; retried with backoff for up to ``timeout`` seconds.

    On a busy machine a connection attempt can fail although the chief is up
    (its accept queue full, this process starved); that is no reason to fail
    the job before the start-up timeout has run out.
    """
    deadline = time.monotonic() + timeout
    delay = _FIRST_RETRY_SECONDS
    while True:
        remaining = deadline - time.monotonic()
        try:
            store = store_client(host, port, world_size, max(0.1, min(remaining, 10.0)))
            store.set_timeout(op_timeout)  # beats must notice a dead chief quickly
            return store
        except AuthenticationError as exc:  # a wrong secret does not get better with retries
            raise RendezvousTimeoutError(f"{me}: {exc}") from None
        except Exception as exc:  # DistNetworkError, DistStoreError: refused, reset, timed out
            if time.monotonic() + delay >= deadline:
                raise RendezvousTimeoutError(
                    f"{me} could not open its heartbeat connection to the chief's store at "
                    f"{host}:{port} within {timeout:g}s ({first_line(exc)}); is the chief still "
                    f"running? raise CommunicationOptions(timeout_seconds) on a busy machine"
                ) from None
        time.sleep(delay)  # poll: back off before the next connection attempt
        delay = min(delay * 2, _MAX_RETRY_SECONDS)
