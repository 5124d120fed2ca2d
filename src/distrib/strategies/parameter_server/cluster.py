"""Who is who in a parameter-server cluster: validation, task names, RPC names and ranks.

A parameter-server cluster has one ``chief`` (the coordinator, which runs
the user's program), one or more ``worker`` tasks (which run scheduled
functions) and one or more ``ps`` tasks (which hold the variables); an
``evaluator`` may run beside it and takes no part. The chief, workers and ps
tasks form one RPC world, ranked chief, workers, ps.

Example:
    >>> r = SimpleClusterResolver(ClusterSpec({"chief": ["h:1"], "worker": ["h:2", "h:3"],
    ...                                        "ps": ["h:4"]}), task_type="ps", task_id=0)
    >>> c = PSCluster.from_resolver(r)
    >>> c.rpc_names, c.rank, c.describe("worker", 1)
    (['chief', 'worker_0', 'worker_1', 'ps_0'], 3, 'worker 1 (h:3)')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Tuple

from distrib.cluster.errors import ClusterConfigError, quoted_list
from distrib.cluster.task import TaskInfo
from distrib.cluster.validate import validate_task_types

__all__ = ["PSCluster", "STRATEGY_NAME"]

STRATEGY_NAME = "ParameterServerStrategy"
_JOBS = ("chief", "worker", "ps", "evaluator")


@dataclass(frozen=True)
class PSCluster:
    """The RPC world of a parameter-server job, as this process sees it.

    Attributes:
        resolver: the cluster resolver it was built from.
        tasks: the RPC world in rank order (chief, workers, ps).
        task: this process's task.
    """

    resolver: Any
    tasks: Tuple[TaskInfo, ...]
    task: TaskInfo

    @classmethod
    def from_resolver(cls, resolver: Any) -> "PSCluster":
        """Validate the cluster for parameter-server training.

        Raises:
            ClusterConfigError: no ``ps`` or ``worker`` job, no ``chief``, or
                no ``TF_CONFIG`` at all; one line naming what is missing.
        """
        spec = resolver.cluster_spec()
        where = getattr(resolver, "cluster_field", "the cluster spec")
        if not spec or resolver.task_type is None:
            raise ClusterConfigError(
                f"{STRATEGY_NAME} needs a cluster with 'chief', 'worker' and 'ps' tasks, but "
                f"{where} is empty: set TF_CONFIG (or run under `distrib launch --chief "
                f"--workers N --ps M`)")
        validate_task_types(resolver, _JOBS, STRATEGY_NAME)
        jobs = f"{quoted_list(spec.jobs)}"
        for job, why in (("ps", "to hold the variables"), ("worker", "to run scheduled functions"),
                         ("chief", "to coordinate (it runs your program)")):
            if spec.num_tasks(job) == 0:
                raise ClusterConfigError(
                    f"{STRATEGY_NAME} needs at least one {job!r} task {why}, but {where} has "
                    f"jobs {jobs}: add a {job!r} job")
        tasks = tuple(TaskInfo(job, i) for job in ("chief", "worker", "ps")
                      for i in spec.task_indices(job))
        return cls(resolver=resolver, tasks=tasks,
                   task=TaskInfo(resolver.task_type, resolver.task_id))

    # ------------------------------------------------------------ queries
    @property
    def rank(self) -> int:
        """This task's rank in the RPC world (the evaluator has none: -1)."""
        return self.tasks.index(self.task) if self.task in self.tasks else -1

    @property
    def rpc_names(self) -> List[str]:
        return [rpc_name(t) for t in self.tasks]

    @property
    def worker_ids(self) -> List[int]:
        return [t.task_id for t in self.tasks if t.task_type == "worker"]

    @property
    def ps_ids(self) -> List[int]:
        return [t.task_id for t in self.tasks if t.task_type == "ps"]

    @property
    def num_workers(self) -> int:
        return len(self.worker_ids)

    @property
    def num_ps(self) -> int:
        return len(self.ps_ids)

    @property
    def chief_address(self) -> Tuple[str, int]:
        return self.resolver.rendezvous_address

    def describe(self, task_type: str, task_id: int = 0) -> str:
        """``"worker 1 (10.0.0.2:2222)"``; the chief is just ``"chief (h:p)"``."""
        text = self.resolver.describe(TaskInfo(task_type, task_id))
        return text.replace("chief 0", "chief", 1) if task_type == "chief" else text

    def describe_rank(self, rank: int) -> str:
        task = self.tasks[rank]
        return self.describe(task.task_type, task.task_id)


def rpc_name(task: TaskInfo) -> str:
    """The RPC name of a task: ``chief``, ``worker_1``, ``ps_0``."""
    return "chief" if task.task_type == "chief" else f"{task.task_type}_{task.task_id}"
