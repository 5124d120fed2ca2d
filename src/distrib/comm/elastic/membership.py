"""`Membership`: the part an `ElasticCollective` holds that changes who is in a running job.

At each step's end (`step_end`, called by ``strategy.run``) the members have
voted once (`distrib.comm.elastic.resize.vote_entries`): who leaves, which
waiting joiners the chief admits, whether to keep a snapshot. The vote rides
in the step's last gradient bucket (a `distrib.comm.step_flag.StepRider`), so
it costs no message of its own; a step without a gradient reduction votes with
one small all-reduce. Nothing changes until the next step starts
(`apply_pending_resize`); then leavers exit with status 0 and the others
(with any joiners, who catch up as a replacement does) form the next
generation, ranked in task order (`Membership.tasks`: each rank's task).

Example (3 workers; worker 1 leaves after step 10, comes back and is admitted after step 13)::

    step 10's vote: leave [1]   -> generation 1: tasks [0, 2], ranks 0 and 1
    step 13's vote: join [1]    -> generation 2: tasks [0, 1, 2]; worker 1 catches up from worker 0
"""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Callable, List, Optional, Protocol, Tuple

import torch

from distrib.comm.collective import ReduceOp
from distrib.comm.elastic.oplog import OpLog
from distrib.comm.elastic.payload import encode_payload
from distrib.comm.elastic.recovery import broadcast_payload, rebuild_groups
from distrib.comm.elastic.resize import (admit, changes_to_make, leave_requested, next_members, read_vote,
                                         vote_entries, waiting_joiners)
from distrib.comm.health import HealthMonitor
from distrib.comm.elastic import snapshot_every
from distrib.comm.elastic.snapshot_policy import SnapshotPolicy
from distrib.comm.step_flag import StepFlag, StepRider
from distrib.process.task_env import LEFT_DIR_ENV

__all__ = ["Membership", "MembershipHost", "LEFT_DIR_ENV", "exit_now", "tell_launcher"]

log = logging.getLogger("distrib.elastic")


class MembershipHost(Protocol):
    """What `Membership` uses of the collective that holds it (`ElasticCollective`)."""

    log: OpLog

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def replaying(self) -> bool: ...

    def describe(self, rank: int) -> str: ...

    def drain(self) -> None: ...

    def control_all_reduce(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> torch.Tensor: ...

    def use_groups(self, groups: Tuple[Any, Any]) -> Any: ...

    def renumber(self, rank: int, world_size: int, describe: Callable[[int], str]) -> None: ...

    def shutdown(self) -> None: ...


class Membership:
    """Who is in the job (the task of each rank, the generation), the step's vote, and resizes."""

    def __init__(self, host: MembershipHost, store: Any, monitor: Optional[HealthMonitor], timeout: float,
                 backend: str, describe_task: Callable[[int], str], max_world: int, joined_late: bool) -> None:
        """``store``, ``monitor``, ``timeout``, ``backend``: the job's store, heartbeat monitor, collective
        timeout and data backend (what a resize builds the next groups with); ``describe_task``: names by
        task (the resolver's); ``max_world``: tasks in the cluster (the most workers the job can have);
        ``joined_late``: a joiner (not a replacement), whose replayed steps were not its own."""
        self._host = host
        self._store = store
        self._monitor = monitor
        self._timeout = timeout
        self._backend = backend
        self._describe_task = describe_task
        self.max_world = max_world
        self.joined_late = joined_late
        self.tasks: Optional[List[int]] = None  # after a resize: the task of each rank
        self.generation = 0
        self._resize_listeners: List[Callable[[List[bool]], None]] = []
        self._chief_refused = False
        self._pending: Optional[tuple] = None  # (leave, join) agreed at the last step's end, applied before the next
        self._snapshot_wanted = False  # the last vote asked for a snapshot
        self._vote_rider: Optional[StepRider] = None  # the vote's entries in the step's last gradient bucket
        self._snapshot_policy: Optional[SnapshotPolicy] = None  # the chief's: when to ask for a snapshot

    # ------------------------------------------------------------ the vote
    def new_step_flag(self) -> StepFlag:
        """The step's flag, which also carries this job's membership vote (`StepRider`)."""
        flag = StepFlag()
        self._vote_rider = StepRider(self._vote_width(), self._vote_entries)
        flag.add_rider(self._vote_rider)
        return flag

    def _vote_width(self) -> int:
        return (self.max_world or self._host.world_size) + 1

    def _vote_entries(self) -> Optional[torch.Tensor]:
        """This rank's entries of the step's vote (`distrib.comm.elastic.resize.vote_entries`); None when
        they are all zero (the usual step: nobody leaves, joins or asks for a snapshot)."""
        rank = self._host.rank
        chief = rank == 0
        admit_now = self._joiners_to_admit() if chief else []
        snapshot = chief and self._wants_snapshot()
        if not (admit_now or snapshot or (not chief and leave_requested())):
            return None
        return vote_entries(self.task_rank(rank), self._vote_width() - 1, admit=admit_now, snapshot=snapshot)

    def _wants_snapshot(self) -> bool:
        """The chief's wish for a snapshot after this step (`distrib.comm.elastic.snapshot_policy`)."""
        if self._snapshot_policy is None:
            self._snapshot_policy = SnapshotPolicy(snapshot_every(), self.waiting)
        return self._snapshot_policy.wants(self._host.log)

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
        host = self._host
        rider = self._vote_rider
        summed = rider.take() if rider is not None else None
        if summed is None:
            entries = self._vote_entries()
            if entries is None:
                entries = torch.zeros(self._vote_width(), dtype=torch.float64)
            summed = host.control_all_reduce(entries, ReduceOp.SUM).tolist()
        if not any(summed):  # the usual step: nothing changes
            self._snapshot_wanted = False
            return
        leave, join, self._snapshot_wanted = read_vote(summed, self._vote_width() - 1)
        if host.rank == 0 and leave_requested() and not self._chief_refused:
            self._chief_refused = True
            log.warning("distrib: %s is the chief (it hosts the job's store) and cannot leave a running job; "
                        "it stays", host.describe(0))
        leave, join = changes_to_make([self.task_rank(r) for r in range(host.world_size)], leave, join)
        if leave or join:
            self._pending = (leave, join)

    def replaying_before_it_joined(self) -> bool:
        """True while a joiner replays the steps before its admission: the members computed all of
        them, so what it computes there (metric sums) must not count a second time."""
        return self.joined_late and self._host.replaying

    def snapshot_wanted(self) -> bool:
        """Whether the last step's vote asks for a snapshot now (none kept since the job changed size)."""
        return self._snapshot_wanted

    def _joiners_to_admit(self) -> List[int]:
        log_ = self._host.log
        snaps = log_.snapshots
        if not snaps or snaps[-1].mark != log_.step_start or self._host.replaying:
            # A joiner starts from the snapshot kept just before this step (every few steps of fit,
            # the first step after a custom loop's save()): not during fit's validation, and not
            # before a snapshot since the last resize.
            return []
        return self.waiting()

    def waiting(self) -> List[int]:
        """The tasks asking to join (reads the store); none while every task of the cluster is a member."""
        world = self._host.world_size
        if world >= self.max_world:
            return []  # every task of the cluster is a member
        members = {self.task_rank(r) for r in range(world)}
        absent = [t for t in range(1, self.max_world) if t not in members]
        if not absent:
            return []
        return waiting_joiners(self._store, absent)

    def apply_pending_resize(self) -> None:
        """Apply the membership change the last step's vote agreed (leavers exit here)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self._resize(*pending)

    def add_resize_listener(self, listener: Callable[[List[bool]], None]) -> None:
        """Call ``listener(leaving)`` (per current rank) on every member, over the old groups, before workers leave."""
        self._resize_listeners.append(listener)

    def remove_resize_listener(self, listener: Callable[[List[bool]], None]) -> None:
        if listener in self._resize_listeners:
            self._resize_listeners.remove(listener)

    def task_rank(self, rank: int) -> int:
        """The task (rank in the cluster) of ``rank``."""
        return rank if self.tasks is None else self.tasks[rank]

    # ------------------------------------------------------------ changing
    def _resize(self, leave: List[int], join: List[int]) -> None:
        host = self._host
        host.drain()
        me = host.describe(host.rank)
        old = [self.task_rank(r) for r in range(host.world_size)]
        if leave:
            flags = [t in leave for t in old]
            for listener in list(self._resize_listeners):
                listener(flags)
        tasks = next_members(old, leave, join)
        task_describe = self._describe_task
        if self.task_rank(host.rank) in leave:
            log.warning("distrib: %s leaves the job after this step (it asked to); %d worker%s go on with "
                        "the same global batch", me, len(tasks), "" if len(tasks) == 1 else "s")
            self._leave()
        start = time.monotonic()
        gen = self.generation + 1
        rank = tasks.index(self.task_rank(host.rank))
        if rank == 0:
            for t in join:
                admit(self._store, t, gen, tasks)
        control = host.use_groups(rebuild_groups(self._store, gen, rank, len(tasks), self._backend, self._timeout))
        if join:  # the chief sends the joiners its newest snapshot and the log since (the members ignore it)
            host.log.close_snapshots()
            data = encode_payload(host.log, host.log.seq, host.log.seq, True) if rank == 0 else b""
            broadcast_payload(data, 0, rank, control)
        if self._monitor is not None:
            self._monitor.forget(leave)
            self._monitor.remember(join)
        self.set_members(tasks, rank, gen, task_describe)
        host.log.forget_before_resize()
        names = [f"{task_describe(t)} left" for t in leave] + [f"{task_describe(t)} joined" for t in join]
        counted = "replica" if any(") replica " in name for name in names) else "worker"  # local replicas
        split = f"split {len(tasks)} ways" if len(tasks) > 1 else "taken whole"
        log.warning("distrib: %s: %s; the job goes on with %d %s%s (was %d) from the next step (generation "
                    "%d formed in %.2fs; now replica %d; each global batch is %s)", me, ", ".join(names),
                    len(tasks), counted, "" if len(tasks) == 1 else "s", len(old), gen, time.monotonic() - start,
                    rank, split)

    def set_generation(self, gen: int, tasks: Optional[List[int]], rank: int,
                       task_describe: Callable[[int], str]) -> None:
        """A replacement joined generation ``gen`` (``tasks``: the task of each rank, None if unchanged since the start)."""
        if tasks is not None:
            self.set_members(tasks, rank, gen, task_describe)
        self.generation = gen

    def set_members(self, tasks: List[int], rank: int, gen: int, task_describe: Callable[[int], str]) -> None:
        """From generation ``gen`` on, rank ``r`` is task ``tasks[r]`` and this task is ``rank``."""
        self._describe_task = task_describe
        self.tasks, self.generation = tasks, gen
        self._host.renumber(rank, len(tasks),
                            lambda r: task_describe(tasks[r]) if 0 <= r < len(tasks) else f"replica {r}")

    def _leave(self) -> None:
        """Exit this process with status 0 now (the job goes on without it); tell the launcher first."""
        tell_launcher("left")
        self._host.shutdown()
        exit_now(0)


def exit_now(status: int) -> None:
    """Exit this process now (the program does not go on), its output flushed."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status)


def tell_launcher(event: str) -> None:
    """Leave an ``<event>-<pid>`` file where ``distrib launch --elastic`` looks (no launcher: nothing)."""
    where = os.environ.get(LEFT_DIR_ENV)
    if where:
        try:
            with open(os.path.join(where, f"{event}-{os.getpid()}"), "w"):
                pass
        except OSError:
            pass
