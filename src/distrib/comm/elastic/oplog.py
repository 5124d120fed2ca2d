"""The log of collective results that lets a replacement catch up without the survivors.

Every collective's result is the same on every replica (an all-reduce's sum,
a broadcast's value, an all-gather's list), so a replica that re-executes the
program from a snapshot can take each collective's result from a survivor's
log instead of the network: it computes exactly what the lost replica
computed, and the survivors never repeat a step.

An `OpLog` numbers this process's collectives (``seq``) and keeps:

* the *startup* results: every collective before the first step (strategy
  creation, initial weights, fit's prologue), kept for the life of the job;
* the *steps* results since the older of the last two snapshots;
* the snapshots: the bytes of a `distrib.train.Checkpoint` state (the safe
  format), each with the ``seq`` it was taken at and the ``seq`` of the first
  step that started after it (its *mark*).

A result is copied when logged, except one *handed over* by its owner (the
gradient synchronizer's reduced bucket, `record` with ``handed_over``): the
log keeps that tensor itself and the owner reduces its next bucket into
another buffer while the log holds it (`holds`). A program that changes such
a result in place afterwards (``zero_grad(set_to_none=False)``, accumulating
into the reduced gradients) is noticed by the tensor's version counter
(`check_handed_over`): that entry is marked spoilt and every later result is
copied.

Example (a replacement restored from the snapshot taken at seq 40, whose mark
is 42; the leader failed at seq 57)::

    startup results: seq 0..11 answered in order while the program starts
    restore -> snapshot bytes; the next step jumps the count to 42
    seq 42..56 answered from the log; seq 57 runs live with the survivors

The log travels to a replacement as a `distrib.comm.elastic.payload`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch

from distrib.errors import DistribError

__all__ = ["Entry", "Snapshot", "OpLog", "Replay", "ReplayMismatchError"]

_KEEP_SNAPSHOTS = 2


class ReplayMismatchError(DistribError, RuntimeError):
    """A replaying replica issued a collective the survivors' log does not hold at that point."""


class Entry:
    """One collective's result: its kind (``"all_reduce"``, ``"control_all_gather"``, ...) and outputs.

    ``versions``: the outputs' version counters when a handed-over result was logged (None: a copy);
    ``spoilt``: the program changed a handed-over result in place, so this entry cannot be replayed.
    """

    __slots__ = ("seq", "kind", "outputs", "versions", "spoilt")

    def __init__(self, seq: int, kind: str, outputs: List[torch.Tensor], versions: Optional[List[int]] = None,
                 spoilt: bool = False) -> None:
        self.seq = seq
        self.kind = kind
        self.outputs = outputs
        self.versions = versions
        self.spoilt = spoilt

    def __repr__(self) -> str:
        return f"Entry(seq={self.seq}, kind={self.kind!r}, outputs={len(self.outputs)})"


@dataclass
class Snapshot:
    """A checkpoint state kept in memory: taken at ``seq``; ``mark`` is the seq of the next step.

    ``data`` is the state's bytes, or an object that gives them with ``bytes(data)`` when asked
    (serialised only if the snapshot is ever sent). ``extras``: one tensor per snapshot listener,
    what it keeps beside the checkpoint (the metric sums folded onto replica 0), sent with it.
    """

    seq: int
    data: Any
    mark: Optional[int] = None
    extras: List[torch.Tensor] = field(default_factory=list)


class OpLog:
    """This process's numbered collective results and in-memory snapshots (see the module docstring)."""

    def __init__(self) -> None:
        self.seq = 0
        self.first_mark: Optional[int] = None
        self.step_start: Optional[int] = None  # the seq the current step started at
        self.startup: List[Entry] = []
        self.entries: List[Entry] = []
        self.snapshots: List[Snapshot] = []
        #: Bytes of results logged since the newest snapshot (the chief's snapshot policy reads it).
        self.bytes_since_snapshot = 0
        #: Steps started since the newest snapshot.
        self.steps_since_snapshot = 0
        #: Copy every result, handed over or not (the program changed a handed-over one in place).
        self.copy_all = False
        self._held: Dict[int, Entry] = {}  # id(tensor) -> the entry that holds a handed-over result
        self._unverified: List[List[Any]] = []  # [entry, step boundaries seen] of handed-over results
        self._spoilt = False  # an entry in `entries` is spoilt

    def record(self, kind: str, outputs: List[torch.Tensor], handed_over: bool = False, own: bool = False) -> None:
        """Log the result of collective ``seq`` and advance ``seq``.

        The outputs are copied, unless ``own`` (nobody else holds them) or ``handed_over`` (their
        owner writes into them no more while `holds` says so; see the module docstring).
        """
        if own:
            entry = Entry(self.seq, kind, outputs)
        elif handed_over and not self.copy_all and self.first_mark is not None:
            entry = Entry(self.seq, kind, list(outputs), [t._version for t in outputs])
            self._held[id(outputs[0])] = entry
            self._unverified.append([entry, 0])
        else:
            entry = Entry(self.seq, kind, [t.detach().clone() for t in outputs])
        (self.startup if self.first_mark is None else self.entries).append(entry)
        for t in entry.outputs:
            self.bytes_since_snapshot += t.nbytes
        self.seq += 1

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is a handed-over result the log still keeps (its owner must not write it)."""
        return id(tensor) in self._held

    def check_handed_over(self) -> bool:
        """At a step boundary: were handed-over results changed in place since they were logged?

        A reduced bucket can be changed by the program until the step after the one that reduced
        it has reduced its own (then nothing points into it any more), so each result is checked
        at two boundaries. The first time one changed, it is marked spoilt, the others still
        watched are copied, and from then on every result is copied; returns True then.
        """
        if not self._unverified:
            return False
        spoilt = False
        watched = []
        for item in self._unverified:
            entry, seen = item
            if any(t._version != v for t, v in zip(entry.outputs, entry.versions or ())):
                entry.spoilt = spoilt = True
            elif seen < 1:
                item[1] = seen + 1
                watched.append(item)
        self._unverified = watched
        if not spoilt:
            return False
        self.copy_all = self._spoilt = True
        for entry, _ in self._unverified:
            entry.outputs, entry.versions = [t.detach().clone() for t in entry.outputs], None
        self._unverified = []
        self._held = {}
        return True

    def has_spoilt(self) -> bool:
        """Whether an entry the log still keeps cannot be replayed (a snapshot after it would cover it)."""
        return self._spoilt

    def mark_step(self) -> None:
        """A step starts now: the first one ends the startup log; open snapshots get their mark."""
        if self.first_mark is None:
            self.first_mark = self.seq
        self.step_start = self.seq
        self.steps_since_snapshot += 1
        for snap in self.snapshots:
            if snap.mark is None:
                snap.mark = self.seq

    def keep_snapshot(self, data: Any, seq: Optional[int] = None, mark: Optional[int] = None,
                      extras: Optional[List[torch.Tensor]] = None) -> None:
        """Keep ``data`` as the newest snapshot; drop what the oldest kept one no longer needs."""
        self.snapshots.append(Snapshot(self.seq if seq is None else seq, data, mark, list(extras or [])))
        del self.snapshots[:-_KEEP_SNAPSHOTS]
        oldest = self.snapshots[0].seq
        self._keep_entries([e for e in self.entries if e.seq >= oldest])
        self.bytes_since_snapshot = self.steps_since_snapshot = 0

    def _keep_entries(self, entries: List[Entry]) -> None:
        self.entries = entries
        self._spoilt = self._spoilt and any(e.spoilt for e in entries)
        if self._held:
            self._held = {id(e.outputs[0]): e for e in entries if e.versions is not None}
            # a dropped result's buffer goes back to its owner, who writes into it again
            self._unverified = [item for item in self._unverified if id(item[0].outputs[0]) in self._held]

    def close_snapshots(self) -> None:
        """The job changes size at this step boundary: the snapshots without a mark get this seq as theirs."""
        for snap in self.snapshots:
            if snap.mark is None:
                snap.mark = self.seq

    def forget_before_resize(self) -> None:
        """The job changed size: no snapshot or result from before can restore a replica of the new one."""
        self.snapshots = []
        self._keep_entries([])

    def catch_up_snapshot(self, until: int) -> Optional[Snapshot]:
        """The newest snapshot a replacement can restore and replay to ``until`` from (its mark <= ``until``)."""
        usable = [s for s in self.snapshots if s.mark is not None and s.mark <= until]
        return usable[-1] if usable else None

    def entries_between(self, start: int, stop: int) -> List[Entry]:
        return [e for e in self.entries if start <= e.seq < stop]


class Replay:
    """Answers a replaying replica's collectives from a survivor's log.

    During a replacement's start-up (before its first step) the program may
    skip collectives the original ran (a resumed `fit` does not draw a new
    shuffle seed), so the log is searched forward for the next entry issued
    from the same place -- after the restore, first among those the survivors
    issued between the snapshot and the next step, then in the start-up log;
    from the first step on every collective must match in order.

    Args:
        startup: results of the collectives before the first step (a replacement's start-up).
        entries: results of later collectives.
        until: the first seq that runs live.
        mark: for a replacement, the seq of the first step after its snapshot (None for a survivor).
    """

    def __init__(self, startup: List[Entry], entries: List[Entry], until: int, mark: Optional[int],
                 snap_seq: Optional[int] = None) -> None:
        self._startup = list(startup)
        self._cursor = 0
        self._entries = {e.seq: e for e in entries}
        # what the survivors ran between the snapshot and the next step (a custom loop's loop top)
        self._tail = [e for e in entries if mark is not None and snap_seq is not None and snap_seq <= e.seq < mark]
        self._tail_cursor = 0
        self.until = until
        self.mark = mark
        self.restored = mark is None  # a survivor has nothing to restore
        self.in_startup = mark is not None

    def step_started(self, log: OpLog) -> None:
        """A step starts: after the restore, a replacement's count jumps to the snapshot's mark.

        Raises:
            ReplayMismatchError: a replacement starts a step without having restored the snapshot.
        """
        if not self.in_startup:
            return
        if not self.restored:
            raise ReplayMismatchError(
                "elastic join: this replacement started a training step before restoring the survivors' "
                "snapshot; elastic training needs BackupAndRestore in fit, or "
                "CheckpointManager.restore_or_initialize() before a custom loop's first step")
        assert self.mark is not None
        log.seq = self.mark
        self.in_startup = False

    def done(self, seq: int) -> bool:
        return not self.in_startup and seq >= self.until

    def take(self, log: OpLog, kind: str, like: Optional[torch.Tensor]) -> Entry:
        """The logged result of this replica's next collective (``log.seq`` is set to its number)."""
        if self.in_startup:
            found = None
            if self.restored:  # after the restore: first what followed the snapshot, then the start-up
                found, self._tail_cursor = _search(self._tail, self._tail_cursor, kind, like)
            if found is None:
                found, self._cursor = _search(self._startup, self._cursor, kind, like)
            if found is not None:
                log.seq = found.seq
                return found
            raise ReplayMismatchError(
                f"elastic start-up: this replacement issued {kind} which the survivors' start-up never "
                f"did; the program does not run the same collectives on every replica")
        entry = self._entries.get(log.seq)
        if entry is None or entry.kind != kind or not _fits(entry, like):
            had = "nothing" if entry is None else entry.kind
            raise ReplayMismatchError(
                f"elastic catch-up: collective #{log.seq} is {kind} here but {had} in the survivors' log; "
                f"the program does not run the same collectives on every replica")
        return entry


def _search(entries: List[Entry], start: int, kind: str, like: Optional[torch.Tensor]) -> "tuple[Optional[Entry], int]":
    """The first entry from ``start`` on that ``kind``/``like`` fits, and the cursor past it (else ``start``)."""
    for i in range(start, len(entries)):
        if entries[i].kind == kind and _fits(entries[i], like):
            return entries[i], i + 1
    return None, start


def _fits(entry: Entry, like: Optional[torch.Tensor]) -> bool:
    if like is None or not entry.outputs:
        return True
    return entry.outputs[0].shape == like.shape and entry.outputs[0].dtype == like.dtype
