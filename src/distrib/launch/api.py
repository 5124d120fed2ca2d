"""`launch`: start a cluster of tasks on one host, supervise it, restart it.

Example:
    Two workers, output captured; each worker reads its role from ``TF_CONFIG``::

        result = launch("train.py", ["--epochs", "3"], workers=2, output="capture")
        result.returncode          # 0
        sorted(result.outputs)     # ['worker 0', 'worker 1']
        result.outputs["worker 1"] # everything worker 1 printed

    With ``max_restarts=2``, a task that crashes makes the launcher stop the
    others and start the whole group again (fresh ports, fresh ``TF_CONFIG``,
    ``DISTRIB_RESTART_COUNT`` one higher), at most twice; a task that exits
    with `RESTART_EXIT_CODE` (preempted, checkpoint saved) restarts the group
    without using up one of those two.
"""
from __future__ import annotations

import os
import queue
import signal
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple, Union

from distrib.comm.secret import SECRET_ENV, SECRET_FILE_ENV, new_secret
from distrib.error_report import short_cause
from distrib.process.exit_codes import (EXIT_TASK_FAILED, MAX_PREEMPTION_RESTARTS,
                                       describe_returncode, signal_exit_code, signal_name)
from distrib.launch.layout import (ClusterLayout, TaskSpec, build_cluster, build_node_cluster,
                                   node_tasks, task_environment)
from distrib.launch.output import OutputRouter
from distrib.process.ports import reserve_ports
from distrib.launch.result import LaunchResult, LaunchTimeoutError
from distrib.launch.signals import catch_signals
from distrib.process.spawn import python_command
from distrib.launch.supervisor import Outcome, TaskGroup, TaskLaunch

__all__ = ["launch", "DEFAULT_GRACE_SECONDS"]

#: Seconds between SIGTERM and SIGKILL when tasks are stopped: time for a
#: preempted task to save its checkpoint.
DEFAULT_GRACE_SECONDS = 10.0

_PREFIX = "distrib launch: "


def _others(count: int) -> str:
    if count == 0:
        return "no other task was running"
    return "stopped the other task" if count == 1 else f"stopped the other {count} tasks"


def _with_columns(env: Dict[str, str], columns: Optional[int]) -> Dict[str, str]:
    """The task's ``COLUMNS``: the launcher's terminal width less the task's line prefix."""
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return env


def _check_target(target: str, module: bool, cwd: Optional[str]) -> None:
    if not target:
        raise ValueError("distrib launch: no script or module given")
    if not module:
        path = target if os.path.isabs(target) else os.path.join(cwd or os.getcwd(), target)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"distrib launch: script not found: {path}")


def _run_attempt(group: TaskGroup, deadline: Optional[float],
                 grace_seconds: float) -> Tuple[Outcome, List[str], List[TaskSpec]]:
    """Start, supervise and stop one group: (why it ended, tasks then running, tasks stopped)."""
    try:
        group.start()
        outcome = group.supervise(deadline)
        if outcome.kind == "preempted":
            group.let_finish(grace_seconds)
        running = group.running_names()
        stopped = group.stop()
    finally:
        group.close()
    return outcome, running, stopped


def launch(
    target: Union[str, "os.PathLike[str]"],
    args: Sequence[Any] = (),
    *,
    workers: int = 1,
    chief: bool = False,
    ps: int = 0,
    evaluator: bool = False,
    module: bool = False,
    max_restarts: int = 0,
    env: Optional[Mapping[str, Optional[str]]] = None,
    cwd: Optional[str] = None,
    timeout: Optional[float] = None,
    host: str = "127.0.0.1",
    output: Union[None, str, TextIO] = None,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    python: Optional[str] = None,
    verbose: bool = False,
    hosts: Optional[Sequence[str]] = None,
    node_rank: int = 0,
    master_port: int = 29500,
    elastic: bool = False,
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
        workers, chief, ps, evaluator: the cluster (see `ClusterLayout`).
        module: run ``target`` as a module (``python -m``).
        max_restarts: restarts allowed after failures; restarts requested
            with `RESTART_EXIT_CODE` do not count (at most
            `MAX_PREEMPTION_RESTARTS` of them).
        env: variables to add to the launcher's environment for the tasks
            (a value of ``None`` removes the variable). Unless it names a job
            secret already (``DISTRIB_JOB_SECRET`` or ``DISTRIB_JOB_SECRET_FILE``),
            the tasks get a fresh random ``DISTRIB_JOB_SECRET`` for this launch.
        cwd: the tasks' working directory (default: the current one).
        timeout: hard limit in seconds on the whole launch, restarts
            included (stopping the tasks may add up to ``grace_seconds``).
        host: address the tasks' ports are picked on and published in ``TF_CONFIG``.
        output: ``None`` (prefixed lines to this process's stdout/stderr),
            ``"capture"`` (kept in the result's ``outputs`` and ``output``)
            or a text stream (every prefixed line written to it).
        grace_seconds: time between SIGTERM and SIGKILL when stopping tasks.
        python: interpreter for the tasks (default: this one).
        verbose: set ``DISTRIB_VERBOSE=1`` in the tasks, so distrib's own
            errors print their full traceback, not just one line.
        hosts: multi-node launch: one address per node, the same list on
            every node; this node starts the ``workers`` tasks of node
            ``node_rank`` with the cluster of `build_node_cluster` (fixed
            ports from ``master_port``; worker 0 at ``hosts[0]`` is the
            chief). A restart restarts this node's tasks only.
        node_rank: this node's index in ``hosts``.
        master_port: first port of a multi-node cluster (the chief's).
        elastic: a failed training task other than the chief is started again
            alone and catches up from the survivors (`distrib.comm.elastic`; sets
            ``DISTRIB_ELASTIC=1`` in every task); each replacement uses one of
            ``max_restarts``. A lost chief still restarts the whole group.

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
    layout = ClusterLayout(workers=workers, chief=chief, ps=ps, evaluator=evaluator)
    fixed_cluster = None
    if hosts is not None:
        if chief or ps or evaluator:
            raise ValueError("distrib launch: a multi-node launch (--hosts) runs worker tasks "
                             "only; drop --chief, --ps and --evaluator")
        fixed_cluster = build_node_cluster(list(hosts), workers, master_port)
        local_tasks = node_tasks(node_rank, len(hosts), workers)
    target = os.fspath(target)
    _check_target(target, module, cwd)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"distrib launch: max_restarts must be an integer >= 0, got {max_restarts!r}")
    if timeout is not None and timeout <= 0:
        raise ValueError(f"distrib launch: timeout must be > 0 seconds, got {timeout!r}")
    router = OutputRouter(output)
    base_env: Dict[str, str] = dict(os.environ)
    if router.live:
        base_env["DISTRIB_PROGRESS_TTY"] = "1"
    else:
        base_env.pop("DISTRIB_PROGRESS_TTY", None)
    if verbose:
        base_env["DISTRIB_VERBOSE"] = "1"
    if elastic:
        base_env["DISTRIB_ELASTIC"] = "1"
    for key, value in (env or {}).items():
        if value is None:
            base_env.pop(key, None)
        else:
            base_env[key] = str(value)
    if not base_env.get(SECRET_ENV) and not base_env.get(SECRET_FILE_ENV):
        if fixed_cluster is None or len(hosts or ()) == 1:
            base_env[SECRET_ENV] = new_secret()  # one per job, in the tasks' environment only
        else:  # the launchers of the other nodes cannot know a secret made here
            print("distrib launch: no job secret for this multi-node job, so its store is not "
                  f"authenticated; export the same {SECRET_ENV} (or {SECRET_FILE_ENV}) on every node",
                  file=sys.stderr)
    command = python_command(target, [str(a) for a in args], module=module, python=python)
    deadline = None if timeout is None else time.monotonic() + timeout
    result = LaunchResult(returncode=EXIT_TASK_FAILED)
    counted = 0
    events: "queue.SimpleQueue[Any]" = queue.SimpleQueue()

    def log(message: str) -> None:
        router.launcher_line(_PREFIX + message)

    def finish() -> LaunchResult:
        result.outputs = router.outputs()
        result.output = router.combined()
        return result

    with catch_signals(events) as interrupts:
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                message = f"timed out after {timeout:g} s before restart {result.restarts}"
                log(message)
                result.failures.append(message)
                raise LaunchTimeoutError(_PREFIX + message, finish())
            if fixed_cluster is not None:
                tasks, cluster, local_training = local_tasks, fixed_cluster, len(local_tasks)
            else:
                tasks = layout.tasks()
                cluster = build_cluster(layout, host, reserve_ports(len(tasks), host))
                local_training = len(layout.training_tasks())
            launches = [
                TaskLaunch(task, command, _with_columns(task_environment(
                    base_env, cluster, task, num_training_tasks=local_training,
                    restart_count=result.restarts), router.task_columns(task.name)))
                for task in tasks
            ]
            router.forget_errors()
            log("starting " + ", ".join(
                f"{t.name} ({cluster[t.task_type][t.task_index]})" for t in tasks))
            group = TaskGroup(launches, router=router, events=events, interrupts=interrupts,
                              grace_seconds=grace_seconds, cwd=cwd,
                              replacements=max_restarts - counted if elastic else 0)
            outcome, running, stopped = _run_attempt(group, deadline, grace_seconds)
            counted += len(group.replaced)
            result.replacements += len(group.replaced)
            result.failures.extend(group.replaced)
            result.tasks = group.statuses()
            if interrupts.signum is not None and outcome.kind != "success":
                outcome = Outcome("signal", signum=interrupts.signum)
            if outcome.kind == "success":
                result.returncode = 0
                return finish()
            if outcome.kind == "signal":
                signum = outcome.signum or 0
                log(f"received {signal_name(signum)}; stopped {len(stopped)} running "
                    f"task{'s' if len(stopped) != 1 else ''}")
                result.returncode = signal_exit_code(signum)
                result.failures.append(f"launcher received {signal_name(signum)}")
                finish()
                if signum == signal.SIGINT:
                    raise KeyboardInterrupt
                return result
            if outcome.kind == "timeout":
                message = (f"timed out after {timeout:g} s; stopped "
                           f"{', '.join(running) if running else 'no running task'}")
                log(message)
                result.failures.append(message)
                raise LaunchTimeoutError(_PREFIX + message, finish())
            assert outcome.task is not None and outcome.returncode is not None
            failure = f"{outcome.task.name} {describe_returncode(outcome.returncode)}"
            if outcome.returncode == -signal.SIGTERM:  # the launcher's own SIGTERMs are never failures
                failure += (" from outside distrib launch (preempted? BackupAndRestore saves and "
                            "restarts on SIGTERM during fit, and exits with 0 once fit completed)")
            result.failures.append(failure)
            # The task's last stderr line: distrib's one-line error or the traceback's last line.
            cause = router.last_error_line(outcome.task.name) if outcome.returncode > 0 else None
            if cause:
                cause = short_cause(cause, outcome.task.name)
            preempted = outcome.kind == "preempted"
            said = f"{failure} ({cause})" if cause and not preempted else failure
            if preempted and result.preemption_restarts < MAX_PREEMPTION_RESTARTS:
                result.preemption_restarts += 1
                result.restarts += 1
                log(f"{said}; restarting all tasks (not counted against max restarts)")
                continue
            if not preempted and counted < max_restarts:
                counted += 1
                result.restarts += 1
                log(f"{said}; restarting all tasks (restart {counted} of {max_restarts})")
                continue
            if preempted:
                tail = f"; giving up after {MAX_PREEMPTION_RESTARTS} preemption restarts"
            elif max_restarts:
                tail = f"; giving up after {max_restarts} restart{'s' if max_restarts != 1 else ''}"
            else:
                tail = ""
            log(f"{said}; {_others(len(stopped))}{tail}")
            result.returncode = EXIT_TASK_FAILED
            return finish()
