"""Which tasks a launch starts, and the ``TF_CONFIG`` and environment each one gets.

``TF_CONFIG`` follows TensorFlow's definition exactly: a JSON object with a
``cluster`` (job name -> list of ``"host:port"``; only jobs that have tasks
appear) and the ``task`` this process is (``type`` and ``index``).

Example:
    >>> layout = ClusterLayout(workers=2, chief=True)
    >>> [t.name for t in layout.tasks()]
    ['chief', 'worker 0', 'worker 1']
    >>> cluster = build_cluster(layout, "127.0.0.1", [5000, 5001, 5002])
    >>> cluster
    {'chief': ['127.0.0.1:5000'], 'worker': ['127.0.0.1:5001', '127.0.0.1:5002']}
    >>> tf_config(cluster, TaskSpec("worker", 1))
    '{"cluster": {"chief": ["127.0.0.1:5000"], "worker": ["127.0.0.1:5001", "127.0.0.1:5002"]}, "task": {"type": "worker", "index": 1}}'
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = [
    "JOB_ORDER",
    "TaskSpec",
    "ClusterLayout",
    "build_cluster",
    "build_node_cluster",
    "node_tasks",
    "tf_config",
    "format_address",
    "available_cpus",
    "task_environment",
]

#: Jobs in the order tasks are started and ranked: chief first, then workers.
JOB_ORDER: Tuple[str, ...] = ("chief", "worker", "ps", "evaluator")

_SINGLE_TASK_JOBS = ("chief", "evaluator")


@dataclass(frozen=True)
class TaskSpec:
    """One task of the cluster: its job (``task_type``) and index in that job."""

    task_type: str
    task_index: int

    @property
    def name(self) -> str:
        """How logs and errors name the task: ``chief``, ``evaluator``, ``worker 1``, ``ps 0``."""
        if self.task_type in _SINGLE_TASK_JOBS:
            return self.task_type
        return f"{self.task_type} {self.task_index}"

    @property
    def is_training(self) -> bool:
        """Chief and workers train; ps tasks serve and the evaluator watches."""
        return self.task_type in ("chief", "worker")


@dataclass(frozen=True)
class ClusterLayout:
    """How many tasks of each job to start.

    Args:
        workers: number of ``worker`` tasks (``>= 0``).
        chief: add one ``chief`` task.
        ps: number of parameter-server tasks (``>= 0``).
        evaluator: add one ``evaluator`` task.

    Raises:
        ValueError: a count is negative or not an integer, or there is no
            chief and no worker.
    """

    workers: int = 1
    chief: bool = False
    ps: int = 0
    evaluator: bool = False

    def __post_init__(self) -> None:
        for field, value in (("workers", self.workers), ("ps", self.ps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"distrib launch: {field} must be an integer >= 0, got {value!r}")
        if self.workers == 0 and not self.chief:
            raise ValueError("distrib launch: need at least one worker or a chief to train")

    def tasks(self) -> List[TaskSpec]:
        """All tasks in rank order: chief, workers, ps, evaluator."""
        counts = {"chief": int(self.chief), "worker": self.workers,
                  "ps": self.ps, "evaluator": int(self.evaluator)}
        return [TaskSpec(job, i) for job in JOB_ORDER for i in range(counts[job])]

    def training_tasks(self) -> List[TaskSpec]:
        """The chief (if any) and the workers, in rank order."""
        return [t for t in self.tasks() if t.is_training]


def format_address(host: str, port: int) -> str:
    """``host:port``, with IPv6 literals in brackets (``[::1]:80``)."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def build_cluster(layout: ClusterLayout, host: str, ports: Sequence[int]) -> Dict[str, List[str]]:
    """The ``cluster`` part of ``TF_CONFIG``: one address per task, in `ClusterLayout.tasks` order."""
    tasks = layout.tasks()
    if len(ports) != len(tasks):
        raise ValueError(f"build_cluster: need {len(tasks)} ports, got {len(ports)}")
    cluster: Dict[str, List[str]] = {}
    for task, port in zip(tasks, ports):
        cluster.setdefault(task.task_type, []).append(format_address(host, port))
    return cluster


def build_node_cluster(hosts: Sequence[str], nproc_per_node: int,
                       master_port: int) -> Dict[str, List[str]]:
    """The ``cluster`` every node of a multi-node launch computes on its own.

    Node ``i`` (``hosts[i]``) runs workers ``i * nproc_per_node`` ..
    ``(i + 1) * nproc_per_node - 1``; worker ``g`` listens on
    ``master_port + g``, so worker 0 (the chief, where everyone meets) is
    ``hosts[0]:master_port`` and no two tasks share a port even when two
    entries name the same machine.

    Example:
        >>> build_node_cluster(["10.0.0.1", "10.0.0.2"], 2, 29500)
        {'worker': ['10.0.0.1:29500', '10.0.0.1:29501', '10.0.0.2:29502', '10.0.0.2:29503']}
    """
    if not hosts:
        raise ValueError("distrib launch: --hosts is empty; give one address per node")
    if nproc_per_node < 1:
        raise ValueError(f"distrib launch: --nproc-per-node must be >= 1, got {nproc_per_node}")
    last = master_port + len(hosts) * nproc_per_node - 1
    if not 1 <= master_port or last > 65535:
        raise ValueError(f"distrib launch: --master-port {master_port} leaves no room for "
                         f"{len(hosts) * nproc_per_node} ports (the last would be {last} > 65535)")
    workers = [format_address(host, master_port + i * nproc_per_node + k)
               for i, host in enumerate(hosts) for k in range(nproc_per_node)]
    return {"worker": workers}


def node_tasks(node_rank: int, nnodes: int, nproc_per_node: int) -> List[TaskSpec]:
    """The worker tasks node ``node_rank`` of ``nnodes`` starts (see `build_node_cluster`)."""
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"distrib launch: --node-rank {node_rank} is out of range for "
                         f"{nnodes} node{'s' if nnodes != 1 else ''} (valid 0..{nnodes - 1})")
    first = node_rank * nproc_per_node
    return [TaskSpec("worker", first + k) for k in range(nproc_per_node)]


def tf_config(cluster: Mapping[str, Sequence[str]], task: TaskSpec) -> str:
    """The ``TF_CONFIG`` JSON string for ``task`` in ``cluster``."""
    if task.task_index >= len(cluster.get(task.task_type, ())):
        raise ValueError(f"tf_config: {task.name} is not in the cluster {dict(cluster)}")
    return json.dumps({
        "cluster": {job: list(cluster[job]) for job in JOB_ORDER if job in cluster},
        "task": {"type": task.task_type, "index": task.task_index},
    })


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def task_environment(
    base: Mapping[str, str],
    cluster: Mapping[str, Sequence[str]],
    task: TaskSpec,
    *,
    num_training_tasks: int,
    restart_count: int,
    cpus: Optional[int] = None,
) -> Dict[str, str]:
    """The environment a task starts with.

    ``base`` (the launcher's environment merged with the user's ``env``) is
    kept, and these are set: ``TF_CONFIG``, ``DISTRIB_LAUNCHED=1``,
    ``DISTRIB_TASK_NAME``, ``DISTRIB_RESTART_COUNT`` (restarts of the group so
    far, ``0`` on the first start), ``PYTHONUNBUFFERED=1``, and, unless
    ``base`` already has it, ``OMP_NUM_THREADS`` = the CPUs divided evenly
    among the training tasks (at least 1), so that they do not oversubscribe
    the machine.
    """
    env = dict(base)
    env["TF_CONFIG"] = tf_config(cluster, task)
    env["DISTRIB_LAUNCHED"] = "1"
    env["DISTRIB_TASK_NAME"] = task.name
    env["DISTRIB_RESTART_COUNT"] = str(restart_count)
    env["PYTHONUNBUFFERED"] = "1"
    if "OMP_NUM_THREADS" not in env:
        cpus = available_cpus() if cpus is None else cpus
        env["OMP_NUM_THREADS"] = str(max(1, cpus // max(1, num_training_tasks)))
    return env
