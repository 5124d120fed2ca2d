"""`launch`: start a cluster of tasks on one host, supervise it, restart it.

Example:
    Two workers, output captured; each worker reads its role from ``TF_CONFIG``::

        result = launch("train.py", ["--epochs", "3"], workers=2, output="capture")
        result.returncode          # 0
        sorted(result.outputs)     # ['worker 0', 'worker 1']
        result.outputs["worker 1"] # everything worker 1 printed

    With ``max_restarts=2``, a task that crashes restarts the whole group (fresh
    ports and ``TF_CONFIG``) at most twice; one that exits with `RESTART_EXIT_CODE`
    (preempted, checkpoint saved) restarts it without using up one of those.

`launch` reads in stages: the layout, checks and environment (with the
store's secret: `distrib.launch.launch_plan`), then per attempt pick ports,
start the tasks, supervise them, decide on a restart
(`distrib.launch.restarts`) and report (`distrib.launch.report`).
"""
from __future__ import annotations

import os
import queue
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from distrib.process.fork_client import FORK_ENV, TaskStarter
from distrib.process.task_env import ELASTIC_ENV, FAILED_AT_ENV, LEFT_DIR_ENV, START_ENV
from distrib.launch.config import DEFAULT_GRACE_SECONDS, LaunchConfig
from distrib.launch.launch_plan import (Cluster, LaunchPlan, base_environment, check_arguments, check_start_workers,
                                        job_secret, output_router, resolve_layout)
from distrib.launch.layout import TaskSpec, build_cluster, task_environment
from distrib.launch.job_store import LauncherStore
from distrib.launch.output import OutputRouter
from distrib.launch.report import LaunchReport
from distrib.launch.restarts import restart_after_failure
from distrib.launch.result import LaunchResult
from distrib.launch.signals import InterruptState, catch_signals
from distrib.launch.supervisor import Outcome, TaskGroup, TaskLaunch
from distrib.process.ports import reserve_ports
from distrib.process.spawn import python_command

__all__ = ["launch", "LaunchConfig", "DEFAULT_GRACE_SECONDS"]


def launch(
    target: Union[str, "os.PathLike[str]"],
    args: Sequence[Any] = (),
    config: Optional[LaunchConfig] = None,
    **options: Any,
) -> LaunchResult:
    """Run ``target`` as every task of a local cluster and supervise it.

    Each task runs ``python target *args`` (or ``python -m target *args``
    with ``module=True``) with its own ``TF_CONFIG`` (see
    `distrib.launch.layout.task_environment` for every variable set). When a
    task fails, the others are stopped (SIGTERM, then SIGKILL after
    ``grace_seconds``) and the launch fails or, while restarts are left,
    starts the whole group again. After a task exits with
    `RESTART_EXIT_CODE` the others first get ``grace_seconds`` to finish
    saving and exit by themselves before they are sent SIGTERM.

    Args:
        target: script path (relative to ``cwd``) or, with ``module=True``, a module name.
        args: command-line arguments for every task.
        config: how to start and supervise the tasks (`LaunchConfig`: the
            cluster, restarts, output, elastic training...; default: its defaults).
        **options: any of `LaunchConfig`'s fields, overriding ``config``'s:
            ``launch("train.py", workers=2)`` is
            ``launch("train.py", config=LaunchConfig(workers=2))``.

    Returns:
        A `LaunchResult`; ``returncode`` is 0 on success, 1 when a task
        failed, ``128 + N`` after the launcher received signal ``N``
        (SIGTERM, SIGHUP).

    Raises:
        LaunchTimeoutError: ``timeout`` ran out; every task was stopped.
        KeyboardInterrupt: SIGINT (Ctrl-C) reached the launcher; every task
            was stopped first (as `subprocess.run` does).
        ValueError, FileNotFoundError: bad arguments (nothing was started).
    """
    c = (config or LaunchConfig()).replace(**options)
    plan = resolve_layout(c.workers, c.chief, c.ps, c.evaluator, c.hosts, c.node_rank, c.master_port)
    target = os.fspath(target)
    check_arguments(target, c.module, c.cwd, c.max_restarts, c.timeout)
    if c.start_workers is not None:
        check_start_workers(c.start_workers, plan, c.elastic)
    router = output_router(c.output, c.output_from, c.log_dir, plan)
    base_env = job_secret(base_environment(router, c.env, c.verbose), plan)
    left_dir = None
    if c.elastic:
        base_env[ELASTIC_ENV] = "1"
        left_dir = tempfile.mkdtemp(prefix="distrib-elastic-")
        base_env[LEFT_DIR_ENV] = left_dir
    elif c.rejoins:
        raise ValueError("rejoins needs elastic=True (distrib launch --elastic)")
    if c.start_workers is not None:
        base_env[START_ENV] = str(c.start_workers)
    job = _Job(python_command(target, [str(a) for a in args], module=c.module, python=c.python),
               base_env, c.cwd, c.grace_seconds, left_dir, max(0, int(c.rejoins)),
               TaskStarter(base_env.get(FORK_ENV), restarts_possible=c.elastic or c.max_restarts > 0,
                           shared=c.fork_server))
    try:
        return _run_attempts(job, plan, c.host, router, c.timeout, c.max_restarts, c.elastic, c.grace_seconds)
    finally:
        job.starter.close()
        router.close()
        if left_dir is not None:
            shutil.rmtree(left_dir, ignore_errors=True)


def _run_attempts(job: "_Job", plan: "LaunchPlan", host: str, router: OutputRouter, timeout: Optional[float],
                  max_restarts: int, elastic: bool, grace_seconds: float) -> LaunchResult:
    """Start attempts until one succeeds, the restarts run out, time runs out or a signal arrives."""
    deadline = None if timeout is None else time.monotonic() + timeout
    report = LaunchReport(router, timeout)
    events: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
    with catch_signals(events) as interrupts:
        while True:
            report.check_time_left(deadline)
            attempt = _pick_ports(plan, host)
            result = report.result
            left = max_restarts - (result.restarts - result.preemption_restarts + result.replacements)
            store = _host_store(job, attempt) if elastic else None
            try:
                group = _start_tasks(job if store is None else replace(job, base_env=store.environment(job.base_env)),
                                     attempt, report, events, interrupts, left if elastic else 0,
                                     chief_replaceable=store is not None)
                outcome, running, stopped = _supervise(group, deadline, grace_seconds, interrupts)
            finally:
                if store is not None:
                    store.close()
            result.replacements += len(group.replaced)
            result.failures.extend(group.replaced)
            report.result.tasks = group.statuses()
            if outcome.kind in ("success", "signal", "timeout"):
                return report.ended(outcome, running, stopped)
            if not restart_after_failure(outcome, stopped, report, max_restarts):
                return report.finish()


# -- pick ports, start the tasks, supervise them --------------------------------------------------

@dataclass(frozen=True)
class _Job:
    """What every attempt starts the same way: the command, its base environment and directory."""

    command: List[str]
    base_env: Mapping[str, str]
    cwd: Optional[str]
    grace_seconds: float
    left_dir: Optional[str] = None
    rejoins: int = 0
    #: Starts the tasks of every attempt: forks of one preloaded server where exact.
    starter: TaskStarter = field(default_factory=lambda: TaskStarter(mode="0"))


@dataclass(frozen=True)
class _Attempt:
    """One attempt's tasks, their cluster and how many of them train on this node."""

    tasks: Sequence[TaskSpec]
    cluster: Cluster
    local_training: int


def _pick_ports(plan: LaunchPlan, host: str) -> _Attempt:
    """This attempt's tasks and their cluster: fresh free ports, unless the cluster is fixed."""
    if plan.node_cluster is not None:
        return _Attempt(plan.node_tasks, plan.node_cluster, len(plan.node_tasks))
    tasks = plan.layout.tasks()
    cluster = build_cluster(plan.layout, host, reserve_ports(len(tasks), host))
    return _Attempt(tasks, cluster, len(plan.layout.training_tasks()))


def _host_store(job: _Job, attempt: _Attempt) -> Optional[LauncherStore]:
    """Elastic: the job's store, hosted here so that it outlives the chief (`distrib.launch.job_store`)."""
    try:
        return LauncherStore.host(attempt.tasks, attempt.cluster, job.base_env)
    except OSError:  # the chief's port is taken: the chief hosts the store and reports it
        return None


def _start_tasks(job: _Job, attempt: _Attempt, report: LaunchReport,
                 events: "queue.SimpleQueue[Any]", interrupts: InterruptState, replacements: int,
                 chief_replaceable: bool = False) -> TaskGroup:
    """The group of this attempt's tasks, each with its own ``TF_CONFIG`` (started by `_supervise`)."""
    router = report.router
    launches = []
    for task in attempt.tasks:
        task_env = task_environment(job.base_env, attempt.cluster, task,
                                    num_training_tasks=attempt.local_training,
                                    restart_count=report.result.restarts)
        if report.failed_at is not None:  # BackupAndRestore says how long before it its backup was saved
            task_env[FAILED_AT_ENV] = f"{report.failed_at:.3f}"
        columns = router.task_columns(task.name)  # the terminal width less the task's line prefix
        if columns is not None:
            task_env["COLUMNS"] = str(columns)
        launches.append(TaskLaunch(task, job.command, task_env))
    router.forget_errors()
    report.log("starting " + ", ".join(
        f"{t.name} ({attempt.cluster[t.task_type][t.task_index]})" for t in attempt.tasks))
    return TaskGroup(launches, router=router, events=events, interrupts=interrupts,
                     grace_seconds=job.grace_seconds, cwd=job.cwd, replacements=replacements,
                     left_dir=job.left_dir, rejoins=job.rejoins, starter=job.starter,
                     chief_replaceable=chief_replaceable)


def _supervise(group: TaskGroup, deadline: Optional[float], grace_seconds: float,
               interrupts: InterruptState) -> Tuple[Outcome, List[str], List[TaskSpec]]:
    """Start, supervise and stop one group: (why it ended, tasks then running, tasks stopped).

    A signal to the launcher outweighs whatever else ended an attempt that did not succeed.
    """
    try:
        group.start()
        outcome = group.supervise(deadline)
        if outcome.kind == "preempted":
            group.let_finish(grace_seconds)
        running = group.running_names()
        stopped = group.stop()
    finally:
        group.close()
    if interrupts.signum is not None and outcome.kind != "success":
        outcome = Outcome("signal", signum=interrupts.signum)
    return outcome, running, stopped
