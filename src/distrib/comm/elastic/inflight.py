"""Asynchronous all-reduces of an elastic task: overlapped, yet numbered and logged in order.

The gradient synchronizer launches a bucket's all-reduce as soon as its
gradients are ready and waits for it only before the optimizer step, so
communication overlaps the rest of the backward pass. An elastic task keeps
that overlap: `ElasticCollective.all_reduce_async` starts the reduction and
`InFlight` holds its handle; the reductions still running complete in the order they were
issued (`wait` on a later one completes the earlier ones first, and any
other collective first completes them all), so each is logged under the
number it would have had if it had run synchronously.

When one fails, the ones issued after it may have failed too or be stuck on
the broken groups: all of them are dropped, the task recovers
(`ElasticCollective._recover`), and each is issued again, in order, on the
new groups -- answered from the leader's log where a survivor had completed
it, else run again. Running it again needs its input, which the failed
reduction may have overwritten: the caller passes ``refill`` (the
synchronizer copies the parameters' gradients into the bucket again), else
the input is copied before the launch.

A caller that hands a bucket over (`ElasticCollective.all_reduce_logged`) gives the reduced tensor to the log,
which keeps it instead of a copy (`OpLog.record`); the synchronizer then
reduces its next bucket into another buffer while `keeps` says the log
holds this one.

Example (3 buckets of one step; worker 2 dies during the second)::

    launch #40, #41, #42 -> wait #40 ok (logged) -> wait #41 fails -> recovery, generation 1
    -> #41 and #42 issued again on generation 1 (from the leader's log, or live) -> logged as #41, #42
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional

import torch

from distrib.comm.collective import ReduceOp
from distrib.comm.elastic.oplog import OpLog
from distrib.comm.errors import DistribCommError, first_line

__all__ = ["InFlight", "Pending"]


class Pending:
    """One all-reduce that was launched and is not logged yet (the handle `all_reduce_async` returns)."""

    __slots__ = ("kind", "tensor", "op", "refill", "handover", "saved", "work", "error")

    def __init__(self, kind: str, tensor: torch.Tensor, op: ReduceOp, refill: Optional[Callable[[], None]],
                 handover: bool) -> None:
        self.kind = kind
        self.tensor = tensor
        self.op = op
        self.refill = refill
        self.handover = handover
        self.saved = None if refill is not None else tensor.detach().clone()
        self.work: Any = None
        self.error: Optional[BaseException] = None

    def restore_input(self) -> None:
        """Put the reduction's input back into its tensor (a failed reduction may have written into it)."""
        if self.refill is not None:
            self.refill()
        else:
            self.tensor.copy_(self.saved)


class InFlight:
    """The reductions one elastic task launched and has not logged yet, completed in launch order.

    Built by `ElasticCollective`, which hands it what it needs: the log, and how to wait for a
    launched reduction, how to run one again through the logged path, how to recover, and
    whether the collective closed.
    """

    def __init__(self, log: OpLog, finish: Callable[[Pending], None], run_again: Callable[[Pending], None],
                 recover: Callable[[str], None], closed: Callable[[], bool]) -> None:
        """``finish(pending)`` waits for a launched reduction (raising `DistribCommError` where it
        failed); ``run_again(pending)`` runs one to completion through the logged, recovering path;
        ``recover(why)`` forms the next generation; ``closed()``: whether the collective shut down."""
        self._log = log
        self._finish = finish
        self._run_again = run_again
        self._recover = recover
        self._closed = closed
        self._pending: List[Pending] = []

    def add(self, pending: Pending) -> Pending:
        """Track ``pending`` (launched on the current groups); returns it (the caller's handle)."""
        self._pending.append(pending)
        return pending

    def wait(self, handle: Any) -> None:
        """Complete ``handle`` and every reduction launched before it."""
        while handle is not None and self._pending and handle in self._pending:
            self._complete_first()

    def drain(self) -> None:
        """Complete every reduction still running (before any other collective, a snapshot, a resize)."""
        while self._pending:
            self._complete_first()

    def _complete_first(self) -> None:
        pending = self._pending[0]
        try:
            self._finish(pending)
        except DistribCommError as exc:
            if self._closed():
                raise
            failure = f"{pending.kind} failed ({first_line(exc)})"
        else:
            self._pending.pop(0)
            self._log.record(pending.kind, [pending.tensor], handed_over=pending.handover)
            return
        dropped, self._pending = self._pending, []
        for again in dropped:  # their works hold the broken groups' connections: let go of them
            again.work = again.error = None
        self._recover(failure)
        for again in dropped:
            again.restore_input()
            self._run_again(again)
