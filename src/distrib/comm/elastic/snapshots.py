"""`Snapshots`: the part an `ElasticCollective` holds that keeps in-memory snapshots and their listeners.

Every task keeps the newest snapshot in its log (`OpLog.keep_snapshot`); a
replacement or joiner receives one with the log and restores it once. A
listener (`distrib.metrics.elastic_fold.MetricFold`) runs around each:
``before_snapshot()`` on every task (it may run collectives), its
``snapshot_extra()`` kept with the snapshot, ``restored(extra)`` in a task
that loaded a survivor's snapshot.

Example (the order on every task)::

    drain the reductions in flight -> listener.before_snapshot() -> state() -> log.keep_snapshot(...)
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional

import torch

from distrib.comm.elastic.oplog import OpLog

__all__ = ["Snapshots"]


class Snapshots:
    """Snapshots kept and received, with their listeners; see the module docstring."""

    def __init__(self, log: OpLog, drain: Callable[[], None], in_startup: Callable[[], bool],
                 kept: Callable[[Any], None]) -> None:
        """``drain()`` completes the reductions in flight; ``in_startup()``: a replacement's start-up,
        which takes no snapshot; ``kept(data)`` learns of each snapshot kept (the chief's policy)."""
        self._log = log
        self._drain = drain
        self._in_startup = in_startup
        self._kept = kept
        self._listeners: List[Any] = []
        self._received: Optional[bytes] = None  # a replacement's: the survivor's, to restore once
        self._extras: Optional[List[torch.Tensor]] = None  # a replacement's: kept with the received snapshot

    def add_listener(self, listener: Any) -> None:
        """Call ``listener.before_snapshot()``, ``snapshot_extra()`` and ``restored(extra)`` (module docstring)."""
        self._listeners.append(listener)

    def keep(self, state: Callable[[], Any]) -> None:
        """Keep ``state()`` as the newest snapshot (every task calls it).

        ``state()`` returns a checkpoint's bytes, or an object whose ``bytes()``
        are those bytes (a `distrib.checkpoint.files.format.FrozenState`: serialised
        only if a replacement or joiner is sent it).
        """
        self._drain()
        if self._in_startup():
            # A replacement's start-up, right after it restored the payload's snapshot (which stays the
            # newest): taking this one would compute it from old answers (the first fold of the metrics
            # would zero the chief's totals); a start-up may skip collectives the log holds.
            return
        listeners = self._listeners
        for listener in listeners:
            listener.before_snapshot()
        data = state()
        extras = [listener.snapshot_extra() for listener in listeners]
        self._log.keep_snapshot(data, extras=[torch.zeros(0) if e is None else e for e in extras])
        self._kept(data)

    def receive(self, payload: dict) -> None:
        """A replacement or joiner: the payload's snapshot is the one to restore, and the log's newest."""
        self._received = payload["snapshot"]
        self._extras = payload["extras"]
        self._log.keep_snapshot(payload["snapshot"], seq=payload["snap_seq"], mark=payload["mark"],
                                extras=payload["extras"])

    def take(self) -> Optional[bytes]:
        """The received snapshot, once; else None."""
        data, self._received = self._received, None
        return None if data is None else bytes(data)

    def restored(self) -> None:
        """The program loaded the snapshot `take` returned: each listener gets the extra kept with it."""
        extras = self._extras or []
        for i, listener in enumerate(self._listeners):
            extra = extras[i] if i < len(extras) and extras[i].numel() else None
            listener.restored(extra)
