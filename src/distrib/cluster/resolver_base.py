"""`ClusterResolver`: who this process is, and everything that follows from it.

A concrete resolver supplies only ``task_type``, ``task_id`` and
``cluster_spec()`` (and optionally ``rpc_layer``). The base derives the rest
once, the same way for every source:

* the **chief** is the ``chief`` task when the cluster has one, else the
  lowest-indexed ``worker`` (worker 0); a process with no task (an empty
  cluster) is a single-process run and is its own chief;
* the **replicas** are the training tasks in rank order: the chief task (if
  any), then the workers by index; ``ps`` and ``evaluator`` are not replicas;
* **rank** is this task's position among the replicas (0 in a single-process
  run, ``None`` on a ps or evaluator task) and **world_size** their number;
* the **rendezvous** is held at the chief's address.

Example:
    >>> r = SimpleClusterResolver(
    ...     ClusterSpec({"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"], "ps": ["h3:2222"]}),
    ...     task_type="worker", task_id=1)
    >>> [str(t) for t in r.replica_tasks], r.rank, r.world_size, r.is_chief
    (['chief 0', 'worker 0', 'worker 1'], 2, 3, False)
    >>> r.rendezvous_address, r.describe(1)
    (('h0', 2222), 'worker 0 (h1:2222)')
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from functools import cached_property
from typing import Optional, Union

from distrib.cluster.address import parse_address
from distrib.cluster.errors import ClusterConfigError, quoted_list
from distrib.cluster.spec import ClusterSpec
from distrib.cluster.task import TaskInfo

__all__ = ["ClusterResolver", "ResolvedClusterResolver"]


@dataclass(frozen=True)
class _Layout:
    task: Optional[TaskInfo]
    chief: Optional[TaskInfo]
    replicas: tuple[TaskInfo, ...]
    rank: Optional[int]


class ClusterResolver(abc.ABC):
    """Abstract source of a cluster description (TF_CONFIG, torchrun, SLURM, explicit)."""

    #: How error messages name the place the cluster was described.
    cluster_field: str = "the cluster spec"

    # ------------------------------------------------ supplied by subclasses
    @property
    @abc.abstractmethod
    def task_type(self) -> Optional[str]:
        """This process's job name, or ``None`` in a single-process run."""

    @property
    @abc.abstractmethod
    def task_id(self) -> Optional[int]:
        """This process's index within its job, or ``None`` in a single-process run."""

    @abc.abstractmethod
    def cluster_spec(self) -> ClusterSpec:
        """The whole cluster (empty in a single-process run)."""

    @property
    def rpc_layer(self) -> Optional[str]:
        """The protocol TF_CONFIG names (``"grpc"``), if any; distrib itself ignores it."""
        return None

    @property
    def environment(self) -> str:
        """TF's ``environment`` entry (``"cloud"``, ``"google"``); empty when not given."""
        return ""

    def num_accelerators(self, task_type: Optional[str] = None,
                         task_id: Optional[int] = None) -> dict[str, int]:
        """Accelerators per device type on a task; this base does not know them (``{}``)."""
        return {}

    # ------------------------------------------------------------ derived
    @cached_property
    def _layout(self) -> _Layout:
        spec = self.cluster_spec()
        task = self._own_task(spec)
        if "chief" in spec.jobs:
            chief: Optional[TaskInfo] = TaskInfo("chief", spec.task_indices("chief")[0])
        elif "worker" in spec.jobs:
            chief = TaskInfo("worker", spec.task_indices("worker")[0])
        else:
            chief = None
        replicas = tuple(TaskInfo(job, i) for job in ("chief", "worker")
                         for i in spec.task_indices(job))
        if task is None:
            rank: Optional[int] = 0
        else:
            rank = replicas.index(task) if task in replicas else None
        return _Layout(task=task, chief=chief, replicas=replicas, rank=rank)

    def _own_task(self, spec: ClusterSpec) -> Optional[TaskInfo]:
        task_type, task_id = self.task_type, self.task_id
        if task_type is None and task_id is None:
            if spec:
                raise ClusterConfigError(
                    f"task_type: not given, but {self.cluster_field} has jobs "
                    f"{quoted_list(spec.jobs)}; every process of a multi-task cluster must name "
                    f"its task")
            return None
        if task_type is None or task_id is None:
            raise ClusterConfigError(
                f"task_id: task_type is {task_type!r} but task_id is {task_id!r}; give both or "
                f"neither")
        task = TaskInfo(task_type, task_id)
        # TensorFlow lets an evaluator run beside a cluster that does not list it.
        if not spec.has_task(task_type, task_id) and not (
                task_type == "evaluator" and "evaluator" not in spec.jobs and spec):
            raise ClusterConfigError(
                f"task: {task} is not in {self.cluster_field} "
                f"({', '.join(f'{j}: {spec.num_tasks(j)}' for j in spec.jobs) or 'empty'})")
        return task

    @property
    def task(self) -> Optional[TaskInfo]:
        """This process's task, or ``None`` in a single-process run."""
        return self._layout.task

    @property
    def chief_task(self) -> Optional[TaskInfo]:
        """The chief (``chief`` task, else worker 0); ``None`` in a single-process run."""
        return self._layout.chief

    @property
    def is_chief(self) -> bool:
        """Whether this process writes checkpoints, summaries and progress output."""
        layout = self._layout
        return layout.task is None or layout.task == layout.chief

    @property
    def chief_address(self) -> Optional[str]:
        """The chief's ``host:port``; ``None`` in a single-process run."""
        chief = self._layout.chief
        return None if chief is None else self.cluster_spec().task_address(
            chief.task_type, chief.task_id)

    @property
    def rendezvous_address(self) -> Optional[tuple[str, int]]:
        """``(host, port)`` where replicas meet: the chief's address (IPv6 without brackets)."""
        address = self.chief_address
        if address is None:
            return None
        return parse_address(address, f"{self.cluster_field} chief address")

    @property
    def replica_tasks(self) -> list[TaskInfo]:
        """Training replicas in rank order: the chief task, then workers by index."""
        return list(self._layout.replicas)

    @property
    def rank(self) -> Optional[int]:
        """This task's replica index (0 single-process, ``None`` on ps/evaluator)."""
        return self._layout.rank

    @property
    def world_size(self) -> int:
        """Number of replicas (1 in a single-process run)."""
        layout = self._layout
        return 1 if layout.task is None else len(layout.replicas)

    def describe(self, task: Union[TaskInfo, int, None] = None) -> str:
        """Names a task for messages: ``"worker 1 (10.0.0.2:2222)"``, ``"worker 3 (rank 3)"``.

        Args:
            task: a `TaskInfo`, a rank, or ``None`` for this process.
        """
        layout = self._layout
        if task is None:
            task = layout.task if layout.task is not None else 0
        if isinstance(task, bool) or not isinstance(task, (int, TaskInfo)):
            raise TypeError(f"describe: expected a TaskInfo or a rank, got {task!r}")
        if isinstance(task, int):
            if layout.task is None and task == 0:
                return "the single process (rank 0)"
            if not 0 <= task < len(layout.replicas):
                raise ClusterConfigError(
                    f"rank: {task} is out of range for {len(layout.replicas)} replicas "
                    f"(valid 0..{len(layout.replicas) - 1})")
            task = layout.replicas[task]
        spec = self.cluster_spec()
        address = spec.task_address(task.task_type, task.task_id) \
            if spec.has_task(task.task_type, task.task_id) else None
        if address is not None:
            return f"{task} ({address})"
        if task in layout.replicas:
            return f"{task} (rank {layout.replicas.index(task)})"
        return str(task)

    def master(self, task_type: Optional[str] = None, task_id: Optional[int] = None,
               rpc_layer: Optional[str] = None) -> str:
        """A task's address with the rpc layer prefixed (``"grpc://h:2222"``); ``""`` if unknown.

        Defaults to this process's task, as in TensorFlow.
        """
        if task_type is None or task_id is None:
            task_type, task_id = self.task_type, self.task_id
        spec = self.cluster_spec()
        if task_type is None or task_id is None or not spec.has_task(task_type, task_id):
            return ""
        address = spec.task_address(task_type, task_id) or ""
        layer = rpc_layer if rpc_layer is not None else self.rpc_layer
        return f"{layer}://{address}" if layer and address else address

    def __repr__(self) -> str:
        task = f"{self.task_type} {self.task_id}" if self.task_type is not None else "None"
        return f"{type(self).__name__}(task={task}, cluster={self.cluster_spec().as_dict()!r})"


class ResolvedClusterResolver(ClusterResolver):
    """A resolver that reads its cluster and task once, when it is made (every one distrib ships).

    A subclass's ``__init__`` sets ``_spec``, ``_task_type`` and ``_task_id``
    (and ``_rpc_layer`` if its source names one); this class answers from them.
    """

    _spec: ClusterSpec
    _task_type: Optional[str] = None
    _task_id: Optional[int] = None
    _rpc_layer: Optional[str] = None

    @property
    def task_type(self) -> Optional[str]:
        return self._task_type

    @property
    def task_id(self) -> Optional[int]:
        return self._task_id

    def cluster_spec(self) -> ClusterSpec:
        return self._spec

    @property
    def rpc_layer(self) -> Optional[str]:
        return self._rpc_layer
