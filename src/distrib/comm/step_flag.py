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

The summed value stays where the reduction left it: the step itself never
reads it on the host. `take` reads it. On an accelerator that read would wait
for the step just queued, so there `take` answers from the reduction *before*
the newest one, which finished long ago (the newest waits for the next
`take`): the decision comes one step later, on every replica alike. On the
CPU the reduction is complete when it is delivered, so `take` answers from
the newest.

Other per-step agreements can ride along too: a `StepRider` (the elastic
job's membership vote, `distrib.comm.elastic.membership`) adds ``width``
elements before the flag; the synchronizer fills them from the rider when it
launches the last bucket and hands the rider their sums when the reduction
completes, unlagged (the rider decides when to read them on the host).

Example (2 workers, worker 1 got SIGTERM during step 7's forward pass):
    step 7's last bucket carries [0] from worker 0 and [1] from worker 1;
    after the reduction both see 1, so ``take()`` is True on both and both
    save at step 7 (at step 8 on GPUs). A signal that lands after worker 1
    launched its last bucket is carried by step 8's.
"""
from __future__ import annotations

import threading
from typing import Callable, List, Optional

import torch

__all__ = ["StepFlag", "StepRider"]


class StepRider:
    """Per-replica values summed by the step's last gradient bucket (see the module docstring).

    Args:
        width: how many elements it adds to the bucket (fixed for the job).
        local: this replica's values, ``width`` of them, read when the bucket launches (None: all zero).

    Example (3 replicas; each contributes a one-hot entry):
        rider = StepRider(3, lambda: torch.eye(3)[rank])
        ... after the step's reduction: rider.take() -> [1.0, 1.0, 1.0]
    """

    def __init__(self, width: int, local: Callable[[], Optional[torch.Tensor]]) -> None:
        self.width = width
        self._local = local
        self._due: Optional[torch.Tensor] = None

    def fill(self, out: torch.Tensor) -> None:
        """Write this replica's values into ``out`` (the bucket's slice) at launch (``local()`` None: zeros)."""
        values = self._local()
        if values is None:
            out.zero_()
        else:
            out.copy_(values)

    def deliver(self, summed: torch.Tensor) -> None:
        """The reduced values (a later delivery before `take` replaces an earlier one).

        A view of the reduced bucket, read by `take` before the bucket is filled again.
        """
        self._due = summed

    def discard(self) -> None:
        self._due = None

    def take(self) -> Optional[List[float]]:
        """The sums delivered since the last `take` (read on the host), or None if none was."""
        value, self._due = self._due, None
        return None if value is None else value.tolist()


class StepFlag:
    """One agreed boolean per gradient reduction; see the module docstring.

    Args:
        lagged: answer from the reduction before the newest (default: where reductions are
            not on the CPU).
    """

    def __init__(self, lagged: Optional[bool] = None) -> None:
        self._sources: List[Callable[[], bool]] = []
        self._lagged = lagged  # None: lag on accelerators only
        self._due: Optional[torch.Tensor] = None  # what `take` answers from
        self._newest: Optional[torch.Tensor] = None  # lagged: the reduction `take` does not wait for yet
        self._lock = threading.Lock()
        self._riders: List[StepRider] = []
        #: Elements this flag adds to the last bucket: its riders' and its own one.
        self.width = 1

    def add_rider(self, rider: StepRider) -> None:
        """Carry ``rider``'s values in every bucket built from now on (before any gradient bucket is)."""
        self._riders.append(rider)
        self.width += rider.width

    def fill(self, tail: torch.Tensor) -> None:
        """Write the riders' values and this replica's flag into the bucket's last `width` elements."""
        at = 0
        for rider in self._riders:
            rider.fill(tail[at:at + rider.width])
            at += rider.width
        tail[-1] = self.local_value()

    def deliver_tail(self, tail: torch.Tensor) -> None:
        """The reduced last `width` elements of a bucket: the riders' sums, then the flag's."""
        at = 0
        for rider in self._riders:
            rider.deliver(tail[at:at + rider.width])
            at += rider.width
        self.deliver(tail[-1:])

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

    def deliver(self, summed: torch.Tensor) -> None:
        """The reduced value of a completed step, a one-element tensor (called by the gradient synchronizer).

        Values delivered before they are taken are OR-ed: with several steps per
        execution, a flag raised in any of them is kept. Nothing is read on the host here.
        """
        value = summed.detach().reshape(()).clone()
        lagged = self._lagged if self._lagged is not None else value.device.type != "cpu"
        if lagged:
            self._due, self._newest = _either(self._due, self._newest), value
        else:
            self._due = _either(self._due, value)

    def discard(self) -> None:
        """Forget every delivered value (a consumer attaching now does not count earlier reductions)."""
        self._due = self._newest = None

    def take(self) -> Optional[bool]:
        """The agreed flag of the reductions not taken yet (see the module docstring), or None if there is none."""
        value, self._due = self._due, None
        return None if value is None else bool(value > 0)


def _either(a: Optional[torch.Tensor], b: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    if a is None or b is None:
        return b if a is None else a
    return torch.maximum(a, b)
