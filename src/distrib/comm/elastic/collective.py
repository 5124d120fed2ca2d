"""`ElasticCollective`: a `TorchCollective` whose survivors outlive a lost task.

Every collective is numbered and its result logged (`distrib.comm.elastic.oplog`).
When one fails, this task does not raise: it enters recovery
(`distrib.comm.elastic.recovery`), which forms a new generation with the other
survivors and a replacement the launcher started, rebuilds the process
groups, and ships the leader's in-memory snapshot and log to whoever needs
them. Then the failed collective is issued again on the new groups: the
survivors never repeat a step; the replacement re-executes from the snapshot
with every collective answered from the log until it reaches the survivors,
so it computes exactly what the lost task computed.

It holds its parts, each built with what it needs (docs/elastic.md): the
log, the reductions in flight, the snapshots and who is in the job.

Example (what the survivors print when worker 2 is SIGKILLed)::

    distrib: worker 0: all_reduce failed (Connection closed by peer); elastic recovery, generation 1
    distrib: worker 0: generation 1 formed in 3.4s (leader worker 0 at collective #57, 1 replacement)
"""
from __future__ import annotations

import gc
import logging
import os
import sys
import time
from typing import Any, Callable, List, Optional, Tuple

import torch
import torch.distributed as dist

from distrib.comm.collective import ReduceOp
from distrib.comm.elastic_abilities import ElasticAbilities, ReductionLog
from distrib.comm.errors import DistribCommError, WorkerLostError, first_line
from distrib.comm.torch_collective import TorchCollective
from distrib.comm.elastic.call_site import call_site as _call_site
from distrib.comm.elastic.inflight import InFlight, Pending
from distrib.comm.elastic.joining import join_as_replacement, join_running_job
from distrib.comm.elastic.oplog import OpLog, Replay
from distrib.comm.elastic.payload import decode_payload, encode_payload
from distrib.comm.elastic.recovery import (ElasticRecoveryError, agreed_backend, broadcast_payload, form_generation,
                                           leader_of, rebuild_groups)
from distrib.comm.elastic.membership import Membership
from distrib.comm.elastic.resize import starting_tasks
from distrib.comm.elastic.snapshots import Snapshots
from distrib.process.task_env import GROW_ENV, JOIN_ENV

__all__ = ["ElasticCollective", "JOIN_ENV"]

log = logging.getLogger("distrib.elastic")

_TRACE = os.environ.get("DISTRIB_ELASTIC_TRACE") == "1"
_ASYNC_OPS = {ReduceOp.SUM: dist.ReduceOp.SUM, ReduceOp.MAX: dist.ReduceOp.MAX, ReduceOp.MIN: dist.ReduceOp.MIN}


class ElasticCollective(TorchCollective, ElasticAbilities, ReductionLog):
    """See the module docstring; created by `connect` like a `TorchCollective`."""

    elastic = True

    def __init__(self, rank: int, world_size: int, group: Any, control_group: Any, monitor: Any, describe: Any,
                 timeout: float, store: Any = None, raw_store: Any = None, backend: Optional[str] = None,
                 cluster_size: int = 0, joined_late: bool = False) -> None:
        """`TorchCollective`'s arguments, and: ``cluster_size``, the tasks the cluster lists (the most
        workers the job can have); ``joined_late``: a joiner, whose replayed steps were not its own."""
        super().__init__(rank, world_size, group, control_group, monitor, describe, timeout, store,
                         raw_store=raw_store, backend=backend)
        self.log = OpLog()
        self.inflight = InFlight(self.log, self._finish, self._reduce_now, self._recover, lambda: self._closed)
        self.membership = Membership(self, store, monitor, timeout, self.backend, describe, cluster_size,
                                     joined_late)
        self.snapshots = Snapshots(self.log, self.inflight.drain, self._in_startup, self.membership.snapshot_kept)
        self._replay: Optional[Replay] = None

    @classmethod
    def _connect_extras(cls, resolver: Any) -> dict:
        return {"cluster_size": resolver.world_size}

    @classmethod
    def connect(cls, resolver: Any, options: Any, device: torch.device) -> "ElasticCollective":
        starting = starting_tasks(resolver.world_size)  # None: every task of the cluster starts the job
        if os.environ.get(JOIN_ENV) == "1":
            return join_as_replacement(cls, resolver, options, starting or resolver.world_size)
        if os.environ.get(GROW_ENV) == "1" or (starting is not None and resolver.rank >= starting):
            return join_running_job(cls, resolver, options)
        collective = super().connect(resolver, options, device, members=starting)
        assert isinstance(collective, ElasticCollective)
        if collective.rank == 0:  # what a replacement or joiner builds its groups with (agreed at start-up)
            agreed_backend(collective._store, collective.backend)
        return collective

    # ------------------------------------------- what its parts use of it (`MembershipHost`)
    @property
    def replaying(self) -> bool:
        """Whether collectives are answered from a survivor's log now (a replacement or joiner catching up)."""
        return self._replay is not None

    def describe(self, rank: int) -> str:
        """The name of the task at ``rank`` now (``worker 2``)."""
        return self._describe(rank)

    def drain(self) -> None:
        """Complete every asynchronous reduction still running."""
        self.inflight.drain()

    def use_groups(self, groups: Tuple[Any, Any]) -> Any:
        """Talk over ``groups`` (a generation's data and control groups, `rebuild_groups`); returns the control group."""
        self._group, self._control = groups
        return self._control

    def renumber(self, rank: int, world_size: int, describe: Callable[[int], str]) -> None:
        """From now on this task is ``rank`` of ``world_size``, and ``describe`` names the ranks."""
        self._rank, self._world_size, self._describe = rank, world_size, describe

    def catch_up_from(self, payload: dict) -> None:
        """A replacement or joiner: restore the payload's snapshot, then replay the log up to its end."""
        self._replay = Replay(payload["startup"], payload["entries"], payload["until"], payload["mark"],
                              payload["snap_seq"])
        self.snapshots.receive(payload)

    def _in_startup(self) -> bool:
        return self._replay is not None and self._replay.in_startup

    # --------------------------------------------------- membership (`ElasticAbilities`)
    @property
    def step_flag(self) -> Any:
        """The step's flag, which also carries this job's membership vote."""
        if self._step_flag is None:
            self._step_flag = self.membership.new_step_flag()
        return self._step_flag

    def step_end(self) -> None:
        self.membership.step_end()

    def apply_pending_resize(self) -> None:
        self.membership.apply_pending_resize()

    def add_resize_listener(self, listener: Callable[[List[bool]], None]) -> None:
        self.membership.add_resize_listener(listener)

    def remove_resize_listener(self, listener: Callable[[List[bool]], None]) -> None:
        self.membership.remove_resize_listener(listener)

    def snapshot_wanted(self) -> bool:
        return self.membership.snapshot_wanted()

    def replaying_before_it_joined(self) -> bool:
        return self.membership.replaying_before_it_joined()

    def joiners_waiting(self) -> List[int]:
        """On the chief: the tasks asking to join, to be admitted at a coming step's end (reads the store)."""
        return self.membership.waiting() if self._rank == 0 else []

    def _task_rank(self, rank: int) -> int:
        return self.membership.task_rank(rank)

    def _tasks_to_wait_for(self) -> set:
        """The chief's shutdown also waits for joiners still waiting: they see it end and exit 0."""
        return super()._tasks_to_wait_for() | set(self.membership.waiting())

    # --------------------------------------------------- snapshots (`ElasticAbilities`)
    def add_snapshot_listener(self, listener: Any) -> None:
        """See `distrib.comm.elastic.snapshots` (`distrib.metrics.elastic_fold.MetricFold` is one)."""
        self.snapshots.add_listener(listener)

    def keep_snapshot(self, state: Callable[[], Any]) -> None:
        self.snapshots.keep(state)

    def snapshot_restored(self) -> None:
        self.snapshots.restored()

    def take_snapshot(self) -> Optional[bytes]:
        """In a replacement, the survivor's snapshot to restore now (once); else None."""
        data = self.snapshots.take()
        if data is not None and self._replay is not None:
            self._replay.restored = True
        return data

    def step_boundary(self) -> None:
        self.inflight.drain()
        if self.log.check_handed_over():
            log.warning("distrib: %s: the program changes reduced gradients in place (zero_grad(set_to_none=False), "
                        "or gradients accumulated into the reduced ones): the elastic log copies them from now on",
                        self._describe(self._rank))
        self.membership.apply_pending_resize()
        if self._replay is not None:
            self._replay.step_started(self.log)
        self.log.mark_step()

    # -------------------------------------------------------- collectives
    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> torch.Tensor:
        return self._in_place("all_reduce", tensor, lambda t: TorchCollective.all_reduce(self, t, op))

    def control_all_reduce(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> torch.Tensor:
        return self._in_place("control_all_reduce", tensor, lambda t: TorchCollective.control_all_reduce(self, t, op))

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        return self._in_place("broadcast", tensor, lambda t: TorchCollective.broadcast(self, t, src))

    def control_broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        return self._in_place("control_broadcast", tensor, lambda t: TorchCollective.control_broadcast(self, t, src))

    def all_gather(self, tensor: torch.Tensor) -> List[torch.Tensor]:
        return self._op("all_gather", None, lambda: _listed(TorchCollective.all_gather(self, tensor)),
                        lambda outs: [o.clone() for o in outs])

    def control_all_gather(self, tensor: torch.Tensor) -> List[torch.Tensor]:
        return self._op("control_all_gather", None,
                        lambda: _listed(TorchCollective.control_all_gather(self, tensor)),
                        lambda outs: [o.clone() for o in outs])

    def barrier(self) -> None:
        self._op("barrier", None, lambda: (TorchCollective.barrier(self), []), lambda outs: None)

    def agree_any(self, flag: bool) -> bool:
        return bool(self._agree(1.0 if flag else 0.0, torch.float32, ReduceOp.MAX) > 0)

    def _agree(self, value: float, dtype: torch.dtype, op: ReduceOp) -> float:
        """``value`` reduced over the replicas: each attempt reduces a fresh tensor, which the log keeps."""
        def attempt() -> Any:
            result = TorchCollective.control_all_reduce(self, torch.tensor([value], dtype=dtype), op)
            return result, [result]
        return self._op("control_all_reduce", _ONE[dtype], attempt, lambda outs: outs[0]).item()

    # ---------------------------------------------------------- machinery
    def _in_place(self, kind: str, tensor: torch.Tensor, run_on: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """An in-place collective, run on a copy: the input stays whole for a retry, the copy is the logged result."""

        def attempt() -> Any:
            result = run_on(tensor.detach().clone())
            return result, [result]

        def apply(outs: List[torch.Tensor]) -> torch.Tensor:
            tensor.copy_(outs[0])
            return tensor
        return self._op(kind, tensor, attempt, apply)

    def _op(self, kind: str, like: Optional[torch.Tensor], attempt: Callable[[], Any],
            apply: Callable[[List[torch.Tensor]], Any]) -> Any:
        return self._op_named(f"{kind}@{_call_site()}", like, attempt, apply)

    def _op_named(self, kind: str, like: Optional[torch.Tensor], attempt: Callable[[], Any],
                  apply: Callable[[List[torch.Tensor]], Any], own: bool = True) -> Any:
        """Run (or, replaying, answer from the log) the collective named ``kind``; log its result.

        ``own``: the outputs ``attempt`` returns are private to this call (`apply` gives the caller
        copies), so the log keeps them as they are; else it copies them.
        """
        self.inflight.drain()
        if _TRACE:
            print(f"distrib elastic trace: {self._describe(self._rank)} #{self.log.seq} {kind} "
                  f"{tuple(like.shape) if like is not None else ''} replay={self._replay is not None}",
                  file=sys.stderr, flush=True)
        while True:
            seq = self.log.seq
            replay = self._replay
            if replay is not None:
                if not replay.done(seq):
                    entry = replay.take(self.log, kind, like)
                    self.log.record(kind, entry.outputs, own=True)  # apply() copies what the caller gets
                    return apply(entry.outputs)
                self._replay = None
            try:
                result, outputs = attempt()
            except DistribCommError as exc:
                if self._closed:
                    raise
                failure = f"{kind} failed ({first_line(exc)})"
            else:
                self.log.record(kind, outputs, own=own)
                return result
            # Recover outside the except clause: the failure's traceback holds the frames (and the process
            # groups in them) that `_close_groups` must let go of.
            self._recover(failure)  # then the log may answer it (a survivor that lagged), else it runs again

    # ------------------------------------------- asynchronous reductions (`ReductionLog`)
    def all_reduce_async(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> Optional[Pending]:
        """Start an in-place all-reduce; `wait` on the returned handle (None: it completed already).

        Its input is copied now, should it have to run again after a recovery.
        """
        return self._launch(f"all_reduce@{_call_site()}", tensor, op, None, False)

    def all_reduce_logged(self, tensor: torch.Tensor, refill: Callable[[], None]) -> Optional[Pending]:
        """`all_reduce_async` (SUM) whose result the log may keep as it is (see `keeps`)."""
        return self._launch(f"all_reduce@{_call_site()}", tensor, ReduceOp.SUM, refill, True)

    def keeps(self, tensor: torch.Tensor) -> bool:
        """Whether the log holds ``tensor`` (a handed-over result): its owner must reduce into another buffer."""
        return self.log.holds(tensor)

    def wait(self, handle: Any) -> None:
        """Complete ``handle`` and every reduction launched before it."""
        self.inflight.wait(handle)

    def _launch(self, kind: str, tensor: torch.Tensor, op: ReduceOp, refill: Optional[Callable[[], None]],
                handover: bool) -> Optional[Pending]:
        if self._replay is not None or op not in _ASYNC_OPS:
            self._reduce_now(Pending(kind, tensor, op, refill, False))
            return None
        pending = Pending(kind, tensor, op, refill, handover)
        try:
            pending.work = dist.all_reduce(tensor, _ASYNC_OPS[op], group=self._group, async_op=True)
        except Exception as exc:  # a broken group may refuse at once: handled when it is waited for
            pending.error = exc
        return self.inflight.add(pending)

    def _finish(self, pending: Pending) -> None:
        """Wait for a launched reduction; a failure raises `DistribCommError` (`InFlight` recovers)."""
        if pending.error is not None:
            raise self._translate("all_reduce", pending.error)
        self._call("all_reduce", pending.work.wait)

    def _reduce_now(self, pending: Pending) -> None:
        """Run one all-reduce to completion through the logged, recovering path (`_op_named`)."""
        tensor = pending.tensor
        first = [True]

        def attempt() -> Any:
            if not first[0]:
                pending.restore_input()  # a collective that failed half-way may have written into it
            first[0] = False
            result = self._call("all_reduce", self._all_reduce, tensor, pending.op, self._group)
            return result, [result]

        def apply(outs: List[torch.Tensor]) -> torch.Tensor:
            if outs[0] is not tensor:
                tensor.copy_(outs[0])
            return tensor
        self._op_named(pending.kind, tensor, attempt, apply, own=False)

    def _translate(self, op: str, exc: BaseException) -> DistribCommError:
        return WorkerLostError(f"{op} on {self._describe(self._rank)} failed: {first_line(exc)}")

    # ----------------------------------------------------------- recovery
    def _recover(self, why: str) -> None:
        me = self._describe(self._rank)
        start = time.monotonic()
        deadline = start + self._timeout
        gen = self.membership.generation
        log.warning("distrib: %s: %s; elastic recovery, generation %d", me, why, gen + 1)
        self._close_groups()
        while True:
            gen += 1
            members = form_generation(self._store, gen, self._rank, self._world_size, self.log.seq, False,
                                      deadline, self._describe, tasks=self.membership.tasks)
            leader, until, since = leader_of(members)
            joining = sum(1 for m in members.values() if m["joining"])
            try:
                self._group, self._control = rebuild_groups(self._store, gen, self._rank, self._world_size,
                                                            self.backend, self._timeout)
                data = encode_payload(self.log, until, since, joining > 0) if self._rank == leader else b""
                payload = decode_payload(broadcast_payload(data, leader, self._rank, self._control))
            except ElasticRecoveryError:
                raise
            except Exception as exc:  # another task died while the generation formed: form the next one
                if time.monotonic() >= deadline:
                    raise ElasticRecoveryError(f"elastic recovery on {me} gave up after {self._timeout:g}s: "
                                               f"{first_line(exc)}") from None
                log.warning("distrib: %s: generation %d failed to form (%s); trying generation %d", me, gen,
                            first_line(exc), gen + 1)
                continue
            if payload["error"]:
                raise ElasticRecoveryError(f"elastic recovery on {me}: {payload['error']}")
            self.membership.generation = gen
            if self.log.seq < until:  # this survivor lagged: the leader's log completes its collectives
                self._replay = Replay([], payload["entries"], until, None)
            log.warning("distrib: %s: generation %d formed in %.2fs (leader %s at collective #%d, %d "
                        "replacement%s)", me, gen, time.monotonic() - start, self._describe(leader), until,
                        joining, "" if joining == 1 else "s")
            return

    def _close_groups(self) -> None:
        """Close this task's process groups now, before the generation forms.

        A survivor whose neighbours in the ring are alive does not see the loss: it waits in its
        collective for data from a survivor that stopped sending. Closing the groups (every
        reference dropped, so gloo closes its connections) fails that wait at once, and that
        survivor enters recovery in turn, and so on around the ring: without it, a job of more
        than three workers waited out the collective timeout.
        """
        self._group = self._control = None
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # a group whose peer died may refuse a clean shutdown; it is dropped anyway
            pass
        gc.collect()


#: What an agreement's tensor looks like (a replay checks the logged result against it).
_ONE = {torch.float32: torch.zeros(1, dtype=torch.float32), torch.float64: torch.zeros(1, dtype=torch.float64)}


def _listed(outs: List[torch.Tensor]) -> Any:
    return outs, list(outs)
