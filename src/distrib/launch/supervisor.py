"""Run one attempt of a launch: start every task, watch them, stop them.

A `TaskGroup` starts its tasks, then `supervise` waits for the first thing
that ends the attempt:

* a task (any job) exits non-zero or is killed by a signal -> ``failed``,
  or ``preempted`` when the code is `RESTART_EXIT_CODE` — except a ``worker``
  of a parameter-server job (one with ``ps`` tasks and a chief): the chief's
  coordinator re-schedules that worker's functions, so the launcher reports
  the loss once and lets the job go on — and except the ``evaluator``, a
  side-car that training never waits for: its failure is reported once too;
* every chief/worker task has finished cleanly: the ps tasks (servers that
  never exit on their own) are stopped, and once the evaluator (if any) has
  finished too -> ``success``;
* the deadline passes -> ``timeout``; the launcher gets a signal -> ``signal``.

Elastic, resizing (``left_dir``): a task that leaves the running job on purpose
(`distrib.comm.elastic.resize`) writes ``left-<pid>`` into ``left_dir`` before
it exits with 0; that exit is neither the job's end nor a failure, and while
``rejoins`` are left the task is started again at once with
``DISTRIB_ELASTIC_GROW=1`` to rejoin the running job at a step boundary.

Elastic, growing: a task that is to join the running job (``distrib launch
--workers MIN:MAX``, or one started again to rejoin) writes ``joined-<pid>``
into ``left_dir`` once admitted; if it fails before that, no member lost
anything, so the launcher reports it once and the job goes on without it.

Elastic (``replacements`` > 0, ``distrib launch --elastic``): a training task
that is killed by a signal (SIGKILL, the OOM killer; not an error exit, which
would recur) is started again alone, as a replacement
(``DISTRIB_ELASTIC_JOIN=1``) that joins the survivors (`distrib.comm.elastic`),
while replacements are left -- the chief too where this launcher hosts the
job's store (``chief_replaceable``, `distrib.launch.job_store`), else only
while the chief still runs; otherwise the attempt fails as above (the whole
group restarts from the last checkpoint).

`stop` sends SIGTERM to each task's process group, waits up to the grace
period, then sends SIGKILL (at once if another signal reaches the launcher
meanwhile, e.g. a second Ctrl-C). After a preemption, `let_finish` first
gives the other tasks the grace period to save and exit on their own. Everything is driven by one event queue:
a thread per task waits for its process and posts ``("exit", group, index,
returncode)``; no polling.
"""
from __future__ import annotations

import itertools
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from distrib.process.exit_codes import RESTART_EXIT_CODE, describe_returncode
from distrib.launch.layout import TaskSpec
from distrib.launch.output import OutputRouter, pump_lines
from distrib.launch.result import TaskStatus
from distrib.launch.signals import InterruptState
from distrib.process.fork_client import ForkedProcess, TaskStarter
from distrib.process.spawn import kill_leftovers, signal_task
from distrib.process.task_env import GROW_ENV, JOIN_ENV, START_ENV

__all__ = ["TaskLaunch", "Outcome", "TaskGroup"]

# After SIGKILL a process is gone almost at once; these bound the waits in
# case one is stuck in the kernel or a grandchild that left the task's
# process group still holds its output pipe.
_KILL_WAIT_SECONDS = 10.0
_PIPE_DRAIN_SECONDS = 10.0

_group_ids = itertools.count()


@dataclass
class TaskLaunch:
    """What to start for one task: its spec, command line and environment."""

    spec: TaskSpec
    command: List[str]
    env: Mapping[str, str]


@dataclass(frozen=True)
class Outcome:
    """Why an attempt ended: ``success``, ``failed``, ``preempted``, ``timeout`` or ``signal``."""

    kind: str
    task: Optional[TaskSpec] = None
    returncode: Optional[int] = None
    signum: Optional[int] = None
    #: When the launcher saw it (``time.time()``), before stopping the other tasks.
    at: float = field(default_factory=time.time)


@dataclass
class _Task:
    launch: TaskLaunch
    proc: Optional[Union[subprocess.Popen, ForkedProcess]] = None
    returncode: Optional[int] = None
    stopped: bool = False
    threads: List[threading.Thread] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.returncode is None


class TaskGroup:
    """The processes of one attempt.

    Args:
        launches: the tasks, in rank order.
        router: where their output lines go.
        events: the launcher's event queue (signal handlers post to it too).
        interrupts: signals the launcher has received.
        grace_seconds: time between SIGTERM and SIGKILL when stopping tasks.
        cwd: working directory of the tasks.
    """

    def __init__(self, launches: Sequence[TaskLaunch], *, router: OutputRouter,
                 events: "queue.SimpleQueue[Any]", interrupts: InterruptState,
                 grace_seconds: float, cwd: Optional[str] = None, replacements: int = 0,
                 left_dir: Optional[str] = None, rejoins: int = 0,
                 starter: Optional[TaskStarter] = None, chief_replaceable: bool = False) -> None:
        self._tasks = [_Task(launch) for launch in launches]
        #: How tasks start: forks of the launch's preloaded server where exact (`distrib.process.fork_client`).
        self._starter = starter if starter is not None else TaskStarter(mode="0")
        #: Elastic: where a task that leaves the job on purpose writes ``left-<pid>`` before its exit 0.
        self._left_dir = left_dir
        #: Elastic: how many more times a task that left may be started again to rejoin the running job.
        self.rejoins_left = rejoins
        #: One line per task that left the running job, e.g. ``"worker 2 left the job"``.
        self.left: List[str] = []
        #: Elastic replacements still allowed (each replaces one lost task, the others keep running).
        self.replacements_left = replacements
        #: Elastic: this launcher hosts the job's store (`distrib.launch.job_store`), so a lost chief is
        #: replaced like any worker; else its loss restarts the group.
        self._chief_replaceable = chief_replaceable
        #: One line per replacement started, e.g. ``"worker 2 killed by SIGKILL"``.
        self.replaced: List[str] = []
        types = {t.launch.spec.task_type for t in self._tasks}
        self._workers_are_replaceable = {"ps", "chief"} <= types
        self._tolerated: set = set()
        self._router = router
        self._events = events
        self._interrupts = interrupts
        self._grace = max(0.0, float(grace_seconds))
        self._cwd = cwd
        self._id = next(_group_ids)
        self._exit_order: List[int] = []

    def start(self) -> None:
        """Start every task; if one cannot be started, kill those already running and re-raise."""
        try:
            for index, task in enumerate(self._tasks):
                self._start_one(index, task)
        except BaseException:
            self.close()
            raise
        if self._tasks:  # a warm spare for the tasks started again later (restarts, elastic replacements)
            first = self._tasks[0].launch
            self._starter.prewarm(first.command, first.env, cwd=self._cwd)

    def supervise(self, deadline: Optional[float]) -> Outcome:
        """Wait until the attempt succeeds, a task fails, time runs out or a signal arrives."""
        while True:
            if self._interrupts.signum is not None:
                return Outcome("signal", signum=self._interrupts.signum)
            for index in list(self._exit_order):
                task = self._tasks[index]
                if task.returncode == 0 and not task.stopped and index not in self._tolerated and self._has_left(task):
                    self._tolerated.add(index)
                    self._rejoin(index)
                    continue
                if task.stopped or task.returncode == 0 or index in self._tolerated:
                    continue
                if task.launch.spec.task_type == "evaluator":
                    self._tolerated.add(index)
                    self._router.launcher_line(
                        f"distrib launch: evaluator {describe_returncode(task.returncode)}; "
                        f"training goes on without it (restart it by hand to resume evaluation)")
                    continue
                if self._workers_are_replaceable and task.launch.spec.task_type == "worker" \
                        and task.returncode != RESTART_EXIT_CODE:
                    self._tolerated.add(index)
                    self._router.launcher_line(
                        f"distrib launch: {task.launch.spec.name} {describe_returncode(task.returncode)}; "
                        f"the chief re-schedules its work on the other workers (parameter-server job)")
                    continue
                if self._failed_before_joining(task):
                    self._tolerated.add(index)
                    self._router.launcher_line(
                        f"distrib launch: {task.launch.spec.name} {describe_returncode(task.returncode)} before it "
                        f"joined the running job; the job goes on without it (elastic)")
                    continue
                if self._replace(index):
                    continue  # the replacement runs: that exit no longer ends the attempt
                kind = "preempted" if task.returncode == RESTART_EXIT_CODE else "failed"
                return Outcome(kind, task=task.launch.spec, returncode=task.returncode)
            if not any(t.running for t in self._tasks if t.launch.spec.is_training):
                servers = [i for i, t in enumerate(self._tasks)
                           if t.launch.spec.task_type == "ps" and t.running and not t.stopped]
                if servers:
                    self.stop(servers)
                    continue
                if not any(t.running and not t.stopped for t in self._tasks):
                    return Outcome("success")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return Outcome("timeout")
            self._next_event(remaining)

    def let_finish(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the running tasks to exit by themselves.

        Used after a task exits with `RESTART_EXIT_CODE`: its peers are then
        usually saving the same checkpoint and about to exit too, and a
        SIGTERM now could cut their save short. Returns early if a signal
        reaches the launcher.
        """
        signals_before = self._interrupts.count
        deadline = time.monotonic() + max(0.0, seconds)
        while any(t.running for t in self._tasks) and self._interrupts.count == signals_before:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._next_event(remaining)

    def stop(self, indices: Optional[Sequence[int]] = None) -> List[TaskSpec]:
        """Stop the given tasks (default: all) that still run; return those it stopped."""
        chosen = range(len(self._tasks)) if indices is None else indices
        targets = [self._tasks[i] for i in chosen if self._tasks[i].running]
        for task in targets:
            task.stopped = True
            _signal_group(task.proc, signal.SIGTERM)
        signals_before = self._interrupts.count
        deadline = time.monotonic() + self._grace
        while any(t.running for t in targets):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._interrupts.count > signals_before:
                break
            self._next_event(remaining)
        self._kill([t for t in targets if t.running])
        return [t.launch.spec for t in targets]

    def close(self) -> None:
        """Kill any task still running and wait for its output to be drained."""
        self._kill([t for t in self._tasks if t.running], mark_stopped=True)
        drain_deadline = time.monotonic() + _PIPE_DRAIN_SECONDS
        for task in self._tasks:
            for thread in task.threads:
                thread.join(max(0.0, drain_deadline - time.monotonic()))

    def statuses(self) -> Dict[str, TaskStatus]:
        """How each task ended (``returncode`` ``None`` for one that never started)."""
        return {t.launch.spec.name: TaskStatus(t.launch.spec.name, t.returncode, t.stopped)
                for t in self._tasks}

    def running_names(self) -> List[str]:
        return [t.launch.spec.name for t in self._tasks if t.running]

    # -- internals --------------------------------------------------------

    def _replace(self, index: int) -> bool:
        """Elastic: start a lost training task again alone; False where that does not apply.

        The chief too where this launcher hosts the job's store; else a lost chief (or a task lost
        while the chief is) restarts the group.
        """
        task = self._tasks[index]
        spec = task.launch.spec
        chief = self._chief_index()
        killed = task.returncode is not None and task.returncode < 0  # an error would recur in a replacement
        chief_lost = chief is not None and (index == chief or not self._tasks[chief].running)
        if (self.replacements_left <= 0 or not killed or not spec.is_training
                or (chief_lost and not self._chief_replaceable)):
            return False  # (on a node without the chief, a replacement finds out whether the chief lives)
        self.replacements_left -= 1
        why = f"{spec.name} {describe_returncode(task.returncode)}"
        self.replaced.append(why)
        self._router.launcher_line(f"distrib launch: {why}; starting a replacement for it alone (elastic: "
                                   f"the other tasks keep their state; {self.replacements_left} replacement"
                                   f"{'s' if self.replacements_left != 1 else ''} left)")
        env = dict(task.launch.env)
        env[JOIN_ENV] = "1"
        self._tasks[index] = _Task(TaskLaunch(spec, task.launch.command, env))
        self._exit_order = [i for i in self._exit_order if i != index]
        self._start_one(index, self._tasks[index])
        return True

    def _has_left(self, task: _Task) -> bool:
        """The task left the running job on purpose (elastic), so its exit 0 ends nothing."""
        return (self._left_dir is not None and task.proc is not None
                and os.path.exists(os.path.join(self._left_dir, f"left-{task.proc.pid}")))

    def _failed_before_joining(self, task: _Task) -> bool:
        """A task that was to join the running job failed before it was admitted: no member lost anything.

        Not on a node whose every task was to join (a late node of ``--nnodes MIN:MAX``): there the
        failure is the launcher's own.
        """
        if self._left_dir is None or task.proc is None or not _joins(task.launch):
            return False
        if all(_joins(t.launch) for t in self._tasks if t.launch.spec.is_training):
            return False
        return not os.path.exists(os.path.join(self._left_dir, f"joined-{task.proc.pid}"))

    def _rejoin(self, index: int) -> None:
        """A task left the running job: note it, and start it again to rejoin while rejoins are left."""
        task = self._tasks[index]
        spec = task.launch.spec
        self.left.append(f"{spec.name} left the job")
        if self.rejoins_left <= 0 or not any(t.running for t in self._tasks if t.launch.spec.is_training):
            self._router.launcher_line(f"distrib launch: {spec.name} left the job (exit 0); the other tasks go on "
                                       f"without it (elastic)")
            return
        self.rejoins_left -= 1
        self._router.launcher_line(f"distrib launch: {spec.name} left the job (exit 0); starting it again to "
                                   f"rejoin the running job (elastic; {self.rejoins_left} rejoin"
                                   f"{'s' if self.rejoins_left != 1 else ''} left)")
        env = dict(task.launch.env)
        env.pop(JOIN_ENV, None)
        env[GROW_ENV] = "1"
        self._tasks[index] = _Task(TaskLaunch(spec, task.launch.command, env))
        self._exit_order = [i for i in self._exit_order if i != index]
        self._tolerated.discard(index)
        self._start_one(index, self._tasks[index])

    def _chief_index(self) -> Optional[int]:
        """The chief's index in this group, None when it runs on another node."""
        specs = [t.launch.spec for t in self._tasks]
        for i, spec in enumerate(specs):
            if spec.task_type == "chief":
                return i
        for i, spec in enumerate(specs):
            if spec.task_type == "worker" and spec.task_index == 0:
                return i
        return None

    def _start_one(self, index: int, task: _Task) -> None:
        name = task.launch.spec.name
        self._router.ensure_task(name)
        proc = self._starter.start(task.launch.command, task.launch.env, cwd=self._cwd)
        task.proc = proc
        for pipe, stream in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            thread = threading.Thread(target=pump_lines, args=(pipe, name, stream, self._router),
                                      name=f"distrib-output-{name}-{stream}", daemon=True)
            thread.start()
            task.threads.append(thread)
        waiter = threading.Thread(target=self._wait_for, args=(index, proc),
                                  name=f"distrib-wait-{name}", daemon=True)
        waiter.start()
        task.threads.append(waiter)

    def _wait_for(self, index: int, proc: Union[subprocess.Popen, ForkedProcess]) -> None:
        returncode = proc.wait()
        kill_leftovers(proc.pid)
        self._events.put(("exit", self._id, index, returncode))

    def _next_event(self, timeout: Optional[float]) -> None:
        try:
            event = self._events.get(timeout=timeout)
        except queue.Empty:
            return
        if event[0] == "exit" and event[1] == self._id:
            _, _, index, returncode = event
            if self._tasks[index].returncode is None:
                self._tasks[index].returncode = returncode
                self._exit_order.append(index)

    def _kill(self, tasks: List[_Task], mark_stopped: bool = False) -> None:
        for task in tasks:
            task.stopped = task.stopped or mark_stopped
            _signal_group(task.proc, signal.SIGKILL)
        deadline = time.monotonic() + _KILL_WAIT_SECONDS
        while any(t.running for t in tasks):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._next_event(remaining)


def _joins(launch: TaskLaunch) -> bool:
    """Whether this task starts by joining a running elastic job rather than starting it."""
    env, spec = launch.env, launch.spec
    start = env.get(START_ENV, "")
    return spec.is_training and (env.get(GROW_ENV) == "1" or (
        start.isdigit() and spec.task_type == "worker" and spec.task_index >= int(start)))


def _signal_group(proc: Union[subprocess.Popen, ForkedProcess], signum: int) -> None:
    """`signal_task`; for a fork, its group and those of the local replicas it forked (their own sessions)."""
    if isinstance(proc, ForkedProcess):
        proc.signal_group(signum)
    else:
        signal_task(proc, signum)
