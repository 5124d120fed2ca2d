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

Asynchronous all-reduces (the gradient buckets) stay asynchronous
(`distrib.comm.elastic.inflight`): they complete, and are numbered, in the
order they were issued, and any other collective first completes them.

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
from typing import Any, Callable, List, Optional

import torch
import torch.distributed as dist

from distrib import hooks
from distrib.comm.collective import ReduceOp
from distrib.comm.errors import DistribCommError, WorkerLostError, first_line
from distrib.comm.rendezvous import store_client
from distrib.comm.torch_collective import TorchCollective
from distrib.comm.elastic.call_site import call_site as _call_site
from distrib.comm.elastic.inflight import InFlight
from distrib.comm.elastic.oplog import OpLog, Replay, ReplayMismatchError
from distrib.comm.elastic.payload import decode_payload, encode_payload
from distrib.comm.elastic.recovery import (ElasticRecoveryError, agreed_backend, broadcast_payload, form_generation,
                                      join_generation, leader_of, rebuild_groups)
from distrib.comm.elastic.membership import Membership, open_job_store
from distrib.comm.elastic.resize import starting_tasks
from distrib.process.task_env import GROW_ENV, JOIN_ENV

__all__ = ["ElasticCollective", "JOIN_ENV"]

log = logging.getLogger("distrib.elastic")

_TRACE = os.environ.get("DISTRIB_ELASTIC_TRACE") == "1"


class ElasticCollective(Membership, InFlight, TorchCollective):
    """See the module docstring; created by `connect` like a `TorchCollective`."""

    elastic = True
    keeps_results = True
    log: OpLog
    _replay: Optional[Replay] = None
    _snapshot: Optional[bytes] = None
    _snapshot_listeners: Optional[List[Any]] = None
    _snapshot_extras: Optional[List[torch.Tensor]] = None  # a replacement's: kept with the payload's snapshot
    _gen = 0

    def __init__(self, rank: int, world_size: int, group: Any, control_group: Any, monitor: Any, describe: Any,
                 timeout: float, store: Any = None, raw_store: Any = None, backend: Optional[str] = None,
                 cluster_size: int = 0, joined_late: bool = False) -> None:
        """`TorchCollective`'s arguments, and: ``cluster_size``, the tasks the cluster lists (the most
        workers the job can have); ``joined_late``: a joiner, whose replayed steps were not its own."""
        super().__init__(rank, world_size, group, control_group, monitor, describe, timeout, store,
                         raw_store=raw_store, backend=backend)
        self.log = OpLog()
        self._max_world = cluster_size
        self._joined_late = joined_late

    @classmethod
    def _connect_extras(cls, resolver: Any) -> dict:
        return {"cluster_size": resolver.world_size}

    @classmethod
    def connect(cls, resolver: Any, options: Any, device: torch.device) -> "ElasticCollective":
        starting = starting_tasks(resolver.world_size)  # None: every task of the cluster starts the job
        if os.environ.get(JOIN_ENV) == "1":
            return cls._join(resolver, options, device, starting or resolver.world_size)
        if os.environ.get(GROW_ENV) == "1" or (starting is not None and resolver.rank >= starting):
            return cls._grow_join(resolver, options, device, _connect)
        collective = super().connect(resolver, options, device, members=starting)
        assert isinstance(collective, ElasticCollective)
        if collective.rank == 0:  # what a replacement or joiner builds its groups with (agreed at start-up)
            agreed_backend(collective._store, collective.backend)
        return collective

    # ---------------------------------------------------------- snapshots
    def add_snapshot_listener(self, listener: Any) -> None:
        """Call ``listener.before_snapshot()`` on every task before each snapshot is taken (it may run
        collectives) and keep ``listener.snapshot_extra()`` (a tensor, or None) with the snapshot; in a
        task that loaded a survivor's snapshot, call ``listener.restored(extra)`` with the one kept
        with it.

        `distrib.metrics.elastic_fold.MetricFold` is one: it moves every replica's metric sums onto
        replica 0 before a snapshot, keeps their totals with it, zeros them in a replacement of any
        other replica and puts the totals back in a replacement of replica 0 (the chief, replaced
        like any worker under ``distrib launch``).
        """
        if self._snapshot_listeners is None:
            self._snapshot_listeners = []
        self._snapshot_listeners.append(listener)

    def keep_snapshot(self, state: Callable[[], Any]) -> None:
        """Keep ``state()`` as the newest in-memory snapshot (every task calls it).

        ``state()`` returns a checkpoint's bytes, or an object whose ``bytes()``
        are those bytes (a `distrib.checkpoint.format.FrozenState`: serialised
        only if a replacement or joiner is sent it).
        """
        self._drain()
        if self._replay is not None and self._replay.in_startup:
            # A replacement's start-up, right after it restored the payload's snapshot (which stays the
            # newest): taking this one would compute it from old answers (the first fold of the metrics
            # would zero the chief's totals); a start-up may skip collectives the log holds.
            return
        listeners = self._snapshot_listeners or []
        for listener in listeners:
            listener.before_snapshot()
        data = state()
        extras = [listener.snapshot_extra() for listener in listeners]
        self.log.keep_snapshot(data, extras=[torch.zeros(0) if e is None else e for e in extras])
        self.snapshot_kept(data)

    def snapshot_restored(self) -> None:
        """The program loaded the snapshot `take_snapshot` returned (see `add_snapshot_listener`)."""
        extras = self._snapshot_extras or []
        for i, listener in enumerate(self._snapshot_listeners or ()):
            extra = extras[i] if i < len(extras) and extras[i].numel() else None
            listener.restored(extra)

    def take_snapshot(self) -> Optional[bytes]:
        """In a replacement, the survivor's snapshot to restore now (once); else None."""
        data, self._snapshot = self._snapshot, None
        if data is not None and self._replay is not None:
            self._replay.restored = True
        return None if data is None else bytes(data)

    def step_boundary(self) -> None:
        self._drain()
        if self.log.check_handed_over():
            log.warning("distrib: %s: the program changes reduced gradients in place (zero_grad(set_to_none=False), "
                        "or gradients accumulated into the reduced ones): the elastic log copies them from now on",
                        self._describe(self._rank))
        self.apply_pending_resize()
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
        self._drain()
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

    def _translate(self, op: str, exc: BaseException) -> DistribCommError:
        return WorkerLostError(f"{op} on {self._describe(self._rank)} failed: {first_line(exc)}")

    # ----------------------------------------------------------- recovery
    def _recover(self, why: str) -> None:
        me = self._describe(self._rank)
        start = time.monotonic()
        deadline = start + self._timeout
        gen = self._gen
        log.warning("distrib: %s: %s; elastic recovery, generation %d", me, why, gen + 1)
        self._close_groups()
        while True:
            gen += 1
            members = form_generation(self._store, gen, self._rank, self._world_size, self.log.seq, False,
                                      deadline, self._describe, tasks=self._tasks)
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
            self._gen = gen
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

    @classmethod
    def _join(cls, resolver: Any, options: Any, device: torch.device, world: int) -> "ElasticCollective":
        """A replacement's connect: meet the survivors in their new generation and take the payload.

        ``world``: the tasks that started the job; the survivors of a job that changed size since
        name the task of each rank in the generation they open (`join_generation`).
        """
        task, describe = resolver.rank, resolver.describe
        timeout = options.timeout
        start = time.monotonic()
        deadline = start + timeout
        raw_store, store, monitor = open_job_store(resolver, timeout, deadline, _connect)
        collective = cls(task, world, None, None, monitor, describe, timeout, store, raw_store=raw_store,
                         backend=agreed_backend(store), cluster_size=resolver.world_size)
        hooks.at_exit(collective.shutdown)
        while True:
            gen, tasks = join_generation(store, task, deadline, describe)
            size = world if tasks is None else len(tasks)
            rank = task if tasks is None else tasks.index(task)
            by_rank = describe if tasks is None else (lambda r, tasks=tasks: describe(tasks[r]))
            members = form_generation(store, gen, rank, size, 0, True, deadline, by_rank)
            leader, _, _ = leader_of(members)
            try:
                control = collective._use_groups(rebuild_groups(store, gen, rank, size, collective.backend, timeout))
                payload = decode_payload(broadcast_payload(b"", leader, rank, control))
                break
            except ReplayMismatchError:
                raise
            except Exception as exc:
                if time.monotonic() >= deadline:
                    raise ElasticRecoveryError(f"elastic join of {describe(task)} gave up: {first_line(exc)}") from None
        if payload["error"]:
            raise ElasticRecoveryError(f"elastic join of {describe(task)}: {payload['error']}")
        members_now = list(range(size)) if tasks is None else tasks
        monitor.forget([t for t in range(resolver.world_size) if t not in members_now])
        collective._set_generation(gen, tasks, rank, describe)
        collective._catch_up_from(payload)
        log.warning("distrib: %s joined generation %d in %.2fs; catching up to collective #%d from a %d-byte "
                    "snapshot", describe(task), gen, time.monotonic() - start, payload["until"],
                    len(payload["snapshot"]))
        return collective


#: What an agreement's tensor looks like (a replay checks the logged result against it).
_ONE = {torch.float32: torch.zeros(1, dtype=torch.float32), torch.float64: torch.zeros(1, dtype=torch.float64)}


def _listed(outs: List[torch.Tensor]) -> Any:
    return outs, list(outs)


def _connect(host: str, port: int, world: int, deadline: float, me: str) -> Any:
    while True:
        try:
            return store_client(host, port, world, max(0.5, min(10.0, deadline - time.monotonic())))
        except Exception as exc:
            if time.monotonic() >= deadline:
                raise ElasticRecoveryError(f"elastic join: {me} cannot reach the chief's store at "
                                           f"{host}:{port}: {first_line(exc)}") from None
        time.sleep(0.1)  # poll: the chief's store may be busy
