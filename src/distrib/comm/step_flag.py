"""`StepFlag`: an "any replica?" flag that rides in each step's gradient all-reduce.

Some decisions must be agreed at every step boundary — above all "was any
worker told to stop (SIGTERM)?" — and asking with a collective of its own
costs one more round trip per step. The last gradient bucket of a step has
one spare element instead: `GradientSynchronizer` writes this replica's flag
(1 if any registered source says so) into it when it launches the bucket,
and hands the summed value back here when the step's reduction completes.
`take` then answers from that step's reduction, at no extra message.

Agreement holds because every replica sees the same summed value, and every
replica runs the same sequence of gradient reductions and `take` calls (an
SPMD program), so all of them either take a delivered value or all find none
(no gradient was reduced since the last `take`: a step without gradients,
`no_sync`, a second consumer in the same step) and fall back to a collective.

Example (2 workers, worker 1 got SIGTERM during step 7's forward pass):
    step 7's last bucket carries [0] from worker 0 and [1] from worker 1;
    after the reduction both see 1, so ``take()`` is True on both and both
    save at step 7. A signal that lands after worker 1 launched its last
    bucket is carried by step 8's.
"""
from __future__ import annotations

import threading
from typing import Callable, List, Optional

__all__ = ["StepFlag"]


class StepFlag:
    """One agreed boolean per gradient reduction; see the module docstring."""

    def __init__(self) -> None:
        self._sources: List[Callable[[], bool]] = []
        self._delivered: Optional[bool] = None
        self._lock = threading.Lock()

    def add_source(self, source: Callable[[], bool]) -> None:
        """Count ``source()`` in this replica's flag from the next launched bucket on."""
        with self._lock:
            self._sources.append(source)

    def remove_source(self, source: Callable[[], bool]) -> None:
        with self._lock:
            if source in self._sources:
                self._sources.remove(source)

    def local_value(self) -> float:
        """What this replica contributes: 1.0 if any source is set (read at bucket launch)."""
        with self._lock:
            sources = list(self._sources)
        return 1.0 if any(source() for source in sources) else 0.0

    def deliver(self, summed: float) -> None:
        """The reduced value of a completed step (called by the gradient synchronizer).

        Values delivered before the next `take` are OR-ed: with several steps
        per execution, a flag raised in any of them is kept.
        """
        self._delivered = bool(self._delivered) or summed > 0.0

    def take(self) -> Optional[bool]:
        """The agreed flag of the last reduction not taken yet, or None if there is none."""
        value, self._delivered = self._delivered, None
        return value
