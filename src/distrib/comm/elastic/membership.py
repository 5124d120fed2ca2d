"""`Membership`: the part of `ElasticCollective` that changes who is in a running job.

At each step's end (`step_end`, called by ``strategy.run``) the members have
voted once (`distrib.comm.elastic.resize.vote_entries`): who leaves, which
waiting joiners the chief admits, whether to keep a snapshot. The vote rides
in the step's last gradient bucket (a `distrib.comm.step_flag.StepRider`), so
it costs no message of its own; a step without a gradient reduction votes with
one small all-reduce. Nothing changes until the next step reads
its input or starts (`apply_pending_resize`), so the program's own use of the
step's results still has every replica. Then leavers exit with status 0, and
the others (with any joiners) build the next generation's process groups,
ranked in task order; a joiner receives the chief's newest snapshot and log
and catches up as a replacement does.

Ranks are dense (``0..world-1``) in the groups; heartbeats, done flags and
names stay keyed by each task's rank in the cluster (its *task*), which
``_tasks`` maps to.

Example (3 workers; worker 1 leaves after step 10, comes back and is admitted after step 13)::

    step 10's vote: leave [1]   -> generation 1: tasks [0, 2], ranks 0 and 1
    step 13's vote: join [1]    -> generation 2: tasks [0, 1, 2]; worker 1 catches up from worker 0
"""
from __future__ import annotations

import logging
import os
import sys
import time
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from distrib import hooks
from distrib.comm.attempt import attempt_namespace
from distrib.comm.collective import ReduceOp
from distrib.comm.elastic.oplog import Replay
from distrib.comm.elastic.payload import decode_payload, encode_payload
from distrib.comm.elastic.recovery import ElasticRecoveryError, agreed_backend, broadcast_payload, rebuild_groups
from distrib.comm.elastic.resize import (admit, changes_to_make, leave_requested, next_members, post_join_request,
                                         read_vote, vote_entries, wait_for_admission, waiting_joiners)
from distrib.comm.health import HealthMonitor
from distrib.comm.elastic import snapshot_every
from distrib.comm.elastic.snapshot_policy import SnapshotPolicy
from distrib.comm.step_flag import StepFlag, StepRider
from distrib.process.task_env import LEFT_DIR_ENV

__all__ = ["Membership", "LEFT_DIR_ENV", "open_job_store"]

log = logging.getLogger("distrib.elastic")


class Membership:
    """Mixed into `ElasticCollective` (which provides the groups, store, log and naming)."""

    _tasks: Optional[List[int]] = None  # after a resize: the task of each rank
    _max_world = 0  # tasks in the cluster (the most workers the job can have)
    _resize_listeners: Optional[List[Callable[[List[bool]], None]]] = None
    _chief_refused = False
    _pending: Optional[tuple] = None  # (leave, join) agreed at the last step's end, applied before the next
    _snapshot_wanted: bool = False  # the last vote asked for a snapshot
    _joined_late: bool = False  # a joiner (not a replacement): its replayed steps were not its own
    _describe_task: Optional[Callable[[int], str]] = None  # names by task, once ranks were renumbered
    _step_flag: Optional[StepFlag] = None
    _vote_rider: Optional[StepRider] = None  # the vote's entries in the step's last gradient bucket
    _snapshot_policy: Optional[SnapshotPolicy] = None  # the chief's: when to ask for a snapshot

    # ------------------------------------------------------------ the vote
    @property
    def step_flag(self) -> StepFlag:
        """The step's flag, which also carries this job's membership vote (`StepRider`)."""
        if self._step_flag is None:
            flag = StepFlag()
            self._vote_rider = StepRider(self._vote_width(), self._vote_entries)
            flag.add_rider(self._vote_rider)
            self._step_flag = flag
        return self._step_flag

    def _vote_width(self) -> int:
        return (self._max_world or self._world_size) + 1

    def _vote_entries(self) -> Optional[torch.Tensor]:
        """This rank's entries of the step's vote (`distrib.comm.elastic.resize.vote_entries`); None when
        they are all zero (the usual step: nobody leaves, joins or asks for a snapshot)."""
        chief = self._rank == 0
        admit_now = self._joiners_to_admit() if chief else []
        snapshot = chief and self._wants_snapshot()
        if not (admit_now or snapshot or (not chief and leave_requested())):
            return None
        return vote_entries(self._task_rank(self._rank), self._vote_width() - 1, admit=admit_now, snapshot=snapshot)

    def _wants_snapshot(self) -> bool:
        """The chief's wish for a snapshot after this step (`distrib.comm.elastic.snapshot_policy`)."""
        if self._snapshot_policy is None:
            self._snapshot_policy = SnapshotPolicy(snapshot_every(), self._waiting)
        return self._snapshot_policy.wants(self.log)

    def snapshot_kept(self, data: Any) -> None:
        """A snapshot was kept (every task): the chief's policy notes its size."""
        if self._snapshot_policy is not None:
            self._snapshot_policy.kept(data)

    def step_end(self) -> None:
        """Agree who leaves and who joins after this step.

        The vote rides in the step's last gradient bucket (`StepRider`); a step that reduced no
        gradient (evaluation) votes with one small all-reduce of its own. Every replica (a
        replaying one too) runs the same reductions, so all take the same path.
        """
        rider = self._vote_rider if self._step_flag is not None else None
        summed = rider.take() if rider is not None else None
        if summed is None:
            entries = self._vote_entries()
            if entries is None:
                entries = torch.zeros(self._vote_width(), dtype=torch.float64)
            summed = self.control_all_reduce(entries, ReduceOp.SUM).tolist()
        if not any(summed):  # the usual step: nothing changes
            self._snapshot_wanted = False
            return
        leave, join, self._snapshot_wanted = read_vote(summed, self._vote_width() - 1)
        if self._rank == 0 and leave_requested() and not self._chief_refused:
            self._chief_refused = True
            log.warning("distrib: %s is the chief (it hosts the job's store) and cannot leave a running job; "
                        "it stays", self._describe(0))
        leave, join = changes_to_make([self._task_rank(r) for r in range(self._world_size)], leave, join)
        if leave or join:
            self._pending = (leave, join)

    def replaying_before_it_joined(self) -> bool:
        """True while a joiner replays the steps before its admission: the members computed all of
        them, so what it computes there (metric sums) must not count a second time."""
        return self._joined_late and self._replay is not None

    def snapshot_wanted(self) -> bool:
        """Whether the last step's vote asks for a snapshot now (none kept since the job changed size)."""
        return self._snapshot_wanted

    def _joiners_to_admit(self) -> List[int]:
        snaps = self.log.snapshots
        if not snaps or snaps[-1].mark != self.log.step_start or self._replay is not None:
            # A joiner starts from the snapshot kept just before this step (every few steps of fit,
            # the first step after a custom loop's save()): not during fit's validation, and not
            # before a snapshot since the last resize.
            return []
        return self._waiting()

    def _waiting(self) -> List[int]:
        if self._world_size >= self._max_world:
            return []  # every task of the cluster is a member
        members = {self._task_rank(r) for r in range(self._world_size)}
        absent = [t for t in range(1, self._max_world) if t not in members]
        if not absent:
            return []
        return waiting_joiners(self._store, absent)

    def joiners_waiting(self) -> List[int]:
        """On the chief: the tasks asking to join, to be admitted at a coming step's end (reads the store)."""
        return self._waiting() if self._rank == 0 else []

    def apply_pending_resize(self) -> None:
        """Apply the membership change the last step's vote agreed (leavers exit here)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self._resize(*pending)

    def add_resize_listener(self, listener: Callable[[List[bool]], None]) -> None:
        """Call ``listener(leaving)`` (per current rank) on every member, over the old groups, before workers leave."""
        if self._resize_listeners is None:
            self._resize_listeners = []
        self._resize_listeners.append(listener)

    def remove_resize_listener(self, listener: Callable[[List[bool]], None]) -> None:
        if self._resize_listeners and listener in self._resize_listeners:
            self._resize_listeners.remove(listener)

    def _task_rank(self, rank: int) -> int:
        return rank if self._tasks is None else self._tasks[rank]

    # ------------------------------------------------------------ changing
    def _resize(self, leave: List[int], join: List[int]) -> None:
        self._drain()  # type: ignore[attr-defined]
        me = self._describe(self._rank)
        old = [self._task_rank(r) for r in range(self._world_size)]
        if leave:
            flags = [t in leave for t in old]
            for listener in list(self._resize_listeners or ()):
                listener(flags)
        tasks = next_members(old, leave, join)
        task_describe = self._task_describe()
        if self._task_rank(self._rank) in leave:
            log.warning("distrib: %s leaves the job after this step (it asked to); %d worker%s go on with "
                        "the same global batch", me, len(tasks), "" if len(tasks) == 1 else "s")
            self._leave()
        start = time.monotonic()
        gen = self._gen + 1
        rank = tasks.index(self._task_rank(self._rank))
        if rank == 0:
            for t in join:
                admit(self._store, t, gen, tasks)
        self._group, self._control = rebuild_groups(self._store, gen, rank, len(tasks), self.backend,
                                                    self._timeout)
        if join:  # the chief sends the joiners its newest snapshot and the log since (the members ignore it)
            self.log.close_snapshots()
            data = encode_payload(self.log, self.log.seq, self.log.seq, True) if rank == 0 else b""
            broadcast_payload(data, 0, rank, self._control)
        if self._monitor is not None:
            self._monitor.forget(leave)
            self._monitor.remember(join)
        self._set_members(tasks, rank, gen, task_describe)
        self.log.forget_before_resize()
        names = [f"{task_describe(t)} left" for t in leave] + [f"{task_describe(t)} joined" for t in join]
        counted = "replica" if any(") replica " in name for name in names) else "worker"  # local replicas
        split = f"split {len(tasks)} ways" if len(tasks) > 1 else "taken whole"
        log.warning("distrib: %s: %s; the job goes on with %d %s%s (was %d) from the next step (generation "
                    "%d formed in %.2fs; now replica %d; each global batch is %s)", me, ", ".join(names),
                    len(tasks), counted, "" if len(tasks) == 1 else "s", len(old), gen, time.monotonic() - start,
                    rank, split)

    def _task_describe(self) -> Callable[[int], str]:
        """Names by task (the resolver's), whatever the current ranks are."""
        return self._describe_task if self._describe_task is not None else self._describe

    def _use_groups(self, groups: Tuple[Any, Any]) -> Any:
        """Talk over ``groups`` (a generation's data and control groups, `rebuild_groups`); returns the control group."""
        self._group, self._control = groups
        return self._control

    def _set_generation(self, gen: int, tasks: Optional[List[int]], rank: int,
                        task_describe: Callable[[int], str]) -> None:
        """A replacement joined generation ``gen`` (``tasks``: the task of each rank, None if unchanged since the start)."""
        if tasks is not None:
            self._set_members(tasks, rank, gen, task_describe)
        self._gen = gen

    def _set_members(self, tasks: List[int], rank: int, gen: int, task_describe: Callable[[int], str]) -> None:
        self._describe_task = task_describe
        self._describe = lambda r: task_describe(tasks[r]) if 0 <= r < len(tasks) else f"replica {r}"
        self._tasks, self._rank, self._world_size, self._gen = tasks, rank, len(tasks), gen

    def _leave(self) -> None:
        """Exit this process with status 0 now (the job goes on without it); tell the launcher first."""
        _tell_launcher("left")
        self.shutdown()
        _exit_now(0)

    def _tasks_to_wait_for(self) -> set:
        """The chief's shutdown also waits for joiners still waiting: they see it end and exit 0."""
        return super()._tasks_to_wait_for() | set(self._waiting())  # type: ignore[misc]

    # ------------------------------------------------------------- joining
    def _catch_up_from(self, payload: Dict[str, Any]) -> None:
        """A replacement or joiner: restore the payload's snapshot, then replay the log up to its end."""
        self._replay = Replay(payload["startup"], payload["entries"], payload["until"], payload["mark"],
                              payload["snap_seq"])
        self._snapshot = payload["snapshot"]
        self._snapshot_extras = payload["extras"]
        self.log.keep_snapshot(payload["snapshot"], seq=payload["snap_seq"], mark=payload["mark"],
                               extras=payload["extras"])

    @classmethod
    def _grow_join(cls, resolver: Any, options: Any, device: torch.device, connect: Callable[..., Any]) -> Any:
        """A joiner's connect: ask the running job to admit this task, then catch up from the chief."""
        task, world, describe = resolver.rank, resolver.world_size, resolver.describe
        timeout = options.timeout
        start = time.monotonic()
        raw_store, store, monitor = open_job_store(resolver, timeout, start + timeout, connect)
        number = post_join_request(store, task)
        log.warning("distrib: %s asks to join the running job", describe(task))
        admitted = wait_for_admission(store, task, number, start + 4 * timeout, describe(task))
        if admitted is None:
            log.warning("distrib: %s: the job ended before it could join; nothing to do", describe(task))
            monitor.close()
            _exit_now(0)
        gen, tasks = admitted
        _tell_launcher("joined")  # from now on this task is a member: its failure is the job's
        rank = tasks.index(task)
        collective = cls(rank, len(tasks), None, None, monitor, describe, timeout, store, raw_store=raw_store,
                         backend=agreed_backend(store), cluster_size=world, joined_late=True)
        hooks.at_exit(collective.shutdown)
        control = collective._use_groups(rebuild_groups(store, gen, rank, len(tasks), collective.backend, timeout))
        payload = decode_payload(broadcast_payload(b"", 0, rank, control))
        if payload["error"]:
            raise ElasticRecoveryError(f"elastic join of {describe(task)}: {payload['error']}")
        collective._set_members(tasks, rank, gen, describe)
        monitor.forget([t for t in range(world) if t not in tasks])
        collective._catch_up_from(payload)
        log.warning("distrib: %s joined the running job (generation %d, replica %d of %d) in %.2fs; catching up "
                    "to collective #%d from a %d-byte snapshot", describe(task), gen, rank, len(tasks),
                    time.monotonic() - start, payload["until"], len(payload["snapshot"]))
        return collective


def open_job_store(resolver: Any, timeout: float, deadline: float,
                   connect: Callable[..., Any]) -> Tuple[Any, Any, HealthMonitor]:
    """A replacement's or joiner's ``(raw store, attempt's store, health monitor)`` at the chief's address."""
    host, port = resolver.rendezvous_address
    task, world, describe = resolver.rank, resolver.world_size, resolver.describe
    raw_store = connect(host, port, world, deadline, describe(task))
    raw_store.set_timeout(timedelta(seconds=timeout))
    store = torch.distributed.PrefixStore(attempt_namespace(), raw_store)
    monitor = HealthMonitor(host, port, task, world, timeout, describe, namespace=attempt_namespace())
    return raw_store, store, monitor


def _exit_now(status: int) -> None:
    """Exit this process now (the program does not go on), its output flushed."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status)


def _tell_launcher(event: str) -> None:
    """Leave an ``<event>-<pid>`` file where ``distrib launch --elastic`` looks (no launcher: nothing)."""
    where = os.environ.get(LEFT_DIR_ENV)
    if where:
        try:
            with open(os.path.join(where, f"{event}-{os.getpid()}"), "w"):
                pass
        except OSError:
            pass
