"""What a `launch` starts, before anything starts: its arguments checked, layout, output routing and environment.

`resolve_layout` turns the cluster arguments into a `LaunchPlan` (a local
layout, or this node's part of a fixed multi-node cluster); `check_arguments`
and `check_start_workers` refuse bad arguments with one line; `output_router`
says where the tasks' lines go; `base_environment` and `job_secret` make the
environment every task starts from (`distrib.launch.api.launch` runs them in
that order).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, TextIO, Tuple, Union

from distrib.comm.secret import SECRET_ENV, SECRET_FILE_ENV, new_secret
from distrib.launch.layout import ClusterLayout, TaskSpec, build_node_cluster, node_tasks
from distrib.launch.output import OutputRouter
from distrib.launch.output_logs import TaskLogs
from distrib.launch.output_select import OutputSelection

__all__ = ["Cluster", "LaunchPlan", "resolve_layout", "check_arguments", "check_start_workers", "output_router",
           "base_environment", "job_secret"]

Cluster = Dict[str, List[str]]


@dataclass(frozen=True)
class LaunchPlan:
    """The tasks this launcher starts: a local layout, or this node's part of a fixed multi-node cluster."""

    layout: ClusterLayout
    node_cluster: Optional[Cluster] = None
    node_tasks: Tuple[TaskSpec, ...] = ()
    nodes: int = 1


def output_router(output: Union[None, str, TextIO], output_from: Optional[str], log_dir: Optional[str],
                  plan: LaunchPlan) -> OutputRouter:
    """Where the tasks' lines go, whose standard output is shown, and the log files, if any."""
    selection = OutputSelection.parse(output_from)
    if plan.node_cluster is None:
        selection.check(plan.layout.tasks())
        local = plan.layout.tasks()
    else:
        selection.check([TaskSpec("worker", i) for i in range(plan.layout.workers * plan.nodes)])
        local = list(plan.node_tasks)
    logs = TaskLogs(log_dir) if log_dir is not None else None
    return OutputRouter(output, stdout_from=selection.task_names(local), logs=logs)


def resolve_layout(workers: int, chief: bool, ps: int, evaluator: bool,
                   hosts: Optional[Sequence[str]], node_rank: int, master_port: int) -> LaunchPlan:
    layout = ClusterLayout(workers=workers, chief=chief, ps=ps, evaluator=evaluator)
    if hosts is None:
        return LaunchPlan(layout)
    if chief or ps or evaluator:
        raise ValueError("distrib launch: a multi-node launch (--hosts) runs worker tasks "
                         "only; drop --chief, --ps and --evaluator")
    cluster = build_node_cluster(list(hosts), workers, master_port)
    return LaunchPlan(layout, cluster, tuple(node_tasks(node_rank, len(hosts), workers)), len(hosts))


def check_start_workers(start_workers: int, plan: LaunchPlan, elastic: bool) -> int:
    layout = plan.layout
    total = layout.workers * plan.nodes
    if not elastic:
        raise ValueError("distrib launch: a range of workers (MIN:MAX) needs --elastic: the workers after MIN "
                         "join the running job")
    if layout.chief or layout.ps or layout.evaluator:
        raise ValueError("distrib launch: a range of workers (MIN:MAX) is for worker tasks only; drop --chief, "
                         "--ps and --evaluator")
    if isinstance(start_workers, bool) or not isinstance(start_workers, int) or not 1 <= start_workers <= total:
        raise ValueError(f"distrib launch: the workers that start the job must be 1 to {total}, got "
                         f"{start_workers!r}")
    return start_workers


def check_arguments(target: str, module: bool, cwd: Optional[str], max_restarts: int,
                    timeout: Optional[float]) -> None:
    if not target:
        raise ValueError("distrib launch: no script or module given")
    if not module:
        path = target if os.path.isabs(target) else os.path.join(cwd or os.getcwd(), target)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"distrib launch: script not found: {path}")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"distrib launch: max_restarts must be an integer >= 0, got {max_restarts!r}")
    if timeout is not None and timeout <= 0:
        raise ValueError(f"distrib launch: timeout must be > 0 seconds, got {timeout!r}")


def base_environment(router: OutputRouter, env: Optional[Mapping[str, Optional[str]]],
                     verbose: bool) -> Dict[str, str]:
    """The launcher's environment with the caller's ``env`` applied: what every task starts from."""
    base_env: Dict[str, str] = dict(os.environ)
    if router.live:
        base_env["DISTRIB_PROGRESS_TTY"] = "1"
    else:
        base_env.pop("DISTRIB_PROGRESS_TTY", None)
    if verbose:
        base_env["DISTRIB_VERBOSE"] = "1"
    for key, value in (env or {}).items():
        if value is None:
            base_env.pop(key, None)
        else:
            base_env[key] = str(value)
    return base_env


def job_secret(base_env: Dict[str, str], plan: LaunchPlan) -> Dict[str, str]:
    """``base_env`` with a fresh job secret for the tasks' store, unless it names one already.

    The launchers of a job's other nodes cannot know a secret made here, so a
    multi-node job without one runs an unauthenticated store (and says so).
    """
    if base_env.get(SECRET_ENV) or base_env.get(SECRET_FILE_ENV):
        return base_env
    if plan.nodes == 1:
        base_env[SECRET_ENV] = new_secret()  # one per job, in the tasks' environment only
    else:
        print("distrib launch: no job secret for this multi-node job, so its store is not "
              f"authenticated; export the same {SECRET_ENV} (or {SECRET_FILE_ENV}) on every node",
              file=sys.stderr)
    return base_env
