"""Asynchronous all-reduces of an elastic task: overlapped, yet numbered and logged in order.

The gradient synchronizer launches a bucket's all-reduce as soon as its
gradients are ready and waits for it only before the optimizer step, so
communication overlaps the rest of the backward pass. An elastic task keeps
that overlap: `InFlight.all_reduce_async` starts the reduction and returns a
handle; the reductions still running complete in the order they were
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

A caller that passes ``handover`` gives the reduced tensor to the log,
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
import torch.distributed as dist

from distrib.comm.collective import ReduceOp
from distrib.comm.elastic.call_site import call_site
from distrib.comm.errors import DistribCommError, first_line

__all__ = ["InFlight", "Pending"]

_TORCH_OPS = {ReduceOp.SUM: dist.ReduceOp.SUM, ReduceOp.MAX: dist.ReduceOp.MAX, ReduceOp.MIN: dist.ReduceOp.MIN}


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
    """Mixed into `ElasticCollective`, which provides the groups, the log, `_op`, `_recover` and `_call`."""

    _pending_ops: Optional[List[Pending]] = None

    def all_reduce_async(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM,
                         refill: Optional[Callable[[], None]] = None, handover: bool = False) -> Optional[Pending]:
        """Start an in-place all-reduce; `wait` on the returned handle (None: it completed already).

        Args:
            refill: writes the input into ``tensor`` again, should the reduction have to run again
                after a recovery (else the input is copied now).
            handover: the log may keep ``tensor`` itself as this result (see the module docstring).
        """
        if self._replay is not None or op not in _TORCH_OPS:  # type: ignore[attr-defined]
            self._reduce_now(f"all_reduce@{call_site()}", Pending("", tensor, op, refill, False))
            return None
        pending = Pending(f"all_reduce@{call_site()}", tensor, op, refill, handover)
        try:
            pending.work = dist.all_reduce(tensor, _TORCH_OPS[op], group=self._group, async_op=True)  # type: ignore[attr-defined]
        except Exception as exc:  # a broken group may refuse at once: handled when it is waited for
            pending.error = exc
        if self._pending_ops is None:
            self._pending_ops = []
        self._pending_ops.append(pending)
        return pending

    def wait(self, handle: Any) -> None:
        """Complete ``handle`` and every reduction launched before it."""
        while handle is not None and self._pending_ops and handle in self._pending_ops:
            self._complete_first()

    def keeps(self, tensor: torch.Tensor) -> bool:
        """Whether the log holds ``tensor`` (a handed-over result): its owner must reduce into another buffer."""
        return self.log.holds(tensor)  # type: ignore[attr-defined]

    def _drain(self) -> None:
        """Complete every reduction still running (before any other collective, a snapshot, a resize)."""
        while self._pending_ops:
            self._complete_first()

    def _complete_first(self) -> None:
        assert self._pending_ops
        pending = self._pending_ops[0]
        try:
            if pending.error is not None:
                raise self._translate("all_reduce", pending.error)  # type: ignore[attr-defined]
            self._call("all_reduce", pending.work.wait)  # type: ignore[attr-defined]
        except DistribCommError as exc:
            if self._closed:  # type: ignore[attr-defined]
                raise
            failure = f"{pending.kind} failed ({first_line(exc)})"
        else:
            self._pending_ops.pop(0)
            self.log.record(pending.kind, [pending.tensor], handed_over=pending.handover)  # type: ignore[attr-defined]
            return
        dropped, self._pending_ops = self._pending_ops, []
        for again in dropped:  # their works hold the broken groups' connections: let go of them
            again.work = again.error = None
        self._recover(failure)  # type: ignore[attr-defined]
        for again in dropped:
            again.restore_input()
            self._reduce_now(again.kind, again)

    def _reduce_now(self, kind: str, pending: Pending) -> None:
        """Run one all-reduce to completion through the logged, recovering path (`ElasticCollective._op`)."""
        tensor = pending.tensor
        first = [True]

        def attempt() -> Any:
            if not first[0]:
                pending.restore_input()  # a collective that failed half-way may have written into it
            first[0] = False
            result = self._call("all_reduce", self._all_reduce, tensor, pending.op,  # type: ignore[attr-defined]
                                self._group)  # type: ignore[attr-defined]
            return result, [result]

        def apply(outs: List[torch.Tensor]) -> torch.Tensor:
            if outs[0] is not tensor:
                tensor.copy_(outs[0])
            return tensor
        self._op_named(kind, tensor, attempt, apply, own=False)  # type: ignore[attr-defined]
