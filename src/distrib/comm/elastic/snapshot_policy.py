"""When the chief asks, in a step's vote, for an elastic snapshot of `fit`.

A snapshot copies the weights and optimizer state and gathers every
replica's generators (one collective); between two, the log keeps every
step's results (the reduced gradients, handed over without a copy). So a
snapshot is taken rarely, at most `DISTRIB_ELASTIC_SNAPSHOT_EVERY` steps
(100) apart, and sooner once the results logged since the last one hold four
times its size (at least 64 MiB): the log then never holds much more memory
than a few snapshots would, and a large model, whose snapshot is the larger
cost, still takes few.

The chief decides and the vote carries the decision to every replica at the
same step (a replaying one reads it from the log), so the decision may rest
on what only the chief knows. It also asks for one when it holds none since
the job changed size, when a logged result cannot be replayed, and when a
joiner waits (joiners are admitted right after a snapshot).

Example (a 2.8M-parameter CNN with Adam: a 33 MB snapshot, 11 MB of gradients a step)::

    steps since the last snapshot: 12 -> 132 MB logged >= 4 x 33 MB: snapshot now
"""
from __future__ import annotations

from typing import Any, Callable, List

__all__ = ["SnapshotPolicy", "LOG_FLOOR_BYTES"]

#: The log may always hold this much since the last snapshot, however small the model.
LOG_FLOOR_BYTES = 64 * 1024 * 1024
_LOG_TIMES_SNAPSHOT = 4


class SnapshotPolicy:
    """The chief's wish for a snapshot after the current step (see the module docstring).

    Args:
        every: the most steps between two snapshots.
        joiners_waiting: the tasks asking to join (the chief reads the job's store, at each step while
            the job has fewer workers than its cluster lists).
    """

    def __init__(self, every: int, joiners_waiting: Callable[[], List[int]]) -> None:
        self.every = every
        self._joiners_waiting = joiners_waiting
        self._joiner = False
        self.snapshot_nbytes = 0

    def kept(self, data: Any) -> None:
        """A snapshot was kept: note its size (`FrozenState.nbytes`, or the bytes' length)."""
        self.snapshot_nbytes = len(data) if isinstance(data, (bytes, bytearray)) else int(data.nbytes)
        self._joiner = False

    def wants(self, log: Any) -> bool:
        """Whether the chief asks for a snapshot at this step's end (``log``: its `OpLog`)."""
        if not log.snapshots or log.has_spoilt():
            return True
        if log.steps_since_snapshot >= self.every:
            return True
        if log.bytes_since_snapshot >= max(_LOG_TIMES_SNAPSHOT * self.snapshot_nbytes, LOG_FLOOR_BYTES):
            return True
        if not self._joiner:
            self._joiner = bool(self._joiners_waiting())  # reads the store only while the job lacks tasks
        return self._joiner

