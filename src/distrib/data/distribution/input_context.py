"""`InputContext` (what a dataset function learns) and `InputPlacement` (where a replica reads).

An input pipeline belongs to a worker task, as in tf.distribute: the D local
replicas of a task (``MirroredStrategy(["cpu:0", "cpu:1"])``, or a
multi-worker task with several local devices) share their task's pipeline and
split each of its batches, so ``num_input_pipelines`` counts tasks, not
replicas. distrib runs one process per replica; each runs its task's whole
pipeline and keeps its own part.

Example:
    >>> ctx = InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
    >>> ctx.get_per_replica_batch_size(128)
    64
    >>> ctx.get_per_replica_batch_size(129)
    Traceback (most recent call last):
    ...
    ValueError: global batch size 129 does not divide by num_replicas_in_sync=2: use a multiple of 2 (e.g. 128 or 130)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Protocol, runtime_checkable

import torch

from distrib.data.batch_split import per_replica_batch_size

if TYPE_CHECKING:  # pragma: no cover
    from distrib.comm.collective import Collective

__all__ = ["InputContext", "InputPlacement", "InputHost", "InputBinding"]


@dataclass(frozen=True)
class InputContext:
    """One input pipeline's view of the job (one pipeline per worker task)."""

    num_input_pipelines: int = 1
    input_pipeline_id: int = 0
    num_replicas_in_sync: int = 1

    def __post_init__(self) -> None:
        if self.num_input_pipelines < 1:
            raise ValueError(f"InputContext.num_input_pipelines must be >= 1, got {self.num_input_pipelines}")
        if not 0 <= self.input_pipeline_id < self.num_input_pipelines:
            raise ValueError(
                f"InputContext.input_pipeline_id must be in [0, {self.num_input_pipelines}), "
                f"got {self.input_pipeline_id}")

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """``global_batch_size // num_replicas_in_sync``; an error when it does not divide."""
        return per_replica_batch_size(global_batch_size, self.num_replicas_in_sync)


@dataclass(frozen=True)
class InputPlacement:
    """Where this replica process stands among the job's input pipelines.

    Replicas are ranked task by task: replica ``input_pipeline_id *
    num_local_replicas + local_replica_id``.

    Example (2 workers with devices cpu:0 and cpu:1 each, this is worker 1's second):
        >>> p = InputPlacement(num_input_pipelines=2, input_pipeline_id=1,
        ...                    num_local_replicas=2, local_replica_id=1)
        >>> p.num_replicas_in_sync, p.replica_id, p.local_ranks
        (4, 3, (2, 3))
    """

    num_input_pipelines: int = 1
    input_pipeline_id: int = 0
    num_local_replicas: int = 1
    local_replica_id: int = 0

    def __post_init__(self) -> None:
        if self.num_local_replicas < 1 or not 0 <= self.local_replica_id < self.num_local_replicas:
            raise ValueError(f"InputPlacement: local replica {self.local_replica_id} of "
                             f"{self.num_local_replicas} is out of range")
        InputContext(self.num_input_pipelines, self.input_pipeline_id)  # validates the pipeline

    @property
    def num_replicas_in_sync(self) -> int:
        return self.num_input_pipelines * self.num_local_replicas

    @property
    def replica_id(self) -> int:
        return self.input_pipeline_id * self.num_local_replicas + self.local_replica_id

    @property
    def local_ranks(self) -> tuple:
        """The replica ids of this task's local replicas."""
        first = self.input_pipeline_id * self.num_local_replicas
        return tuple(range(first, first + self.num_local_replicas))

    def input_context(self) -> InputContext:
        """The `InputContext` a dataset function of this task receives."""
        return InputContext(self.num_input_pipelines, self.input_pipeline_id, self.num_replicas_in_sync)


@runtime_checkable
class InputHost(Protocol):
    """Everything the input layer (`distrib.data.distribution.distributed`) needs from a strategy.

    Every strategy is one; `InputBinding` is one built from parts (what
    CentralStorageStrategy hands the input layer: one process taking whole
    global batches).
    """

    @property
    def device(self) -> torch.device:
        """Where batches are delivered (CPU batches stay where they are)."""

    @property
    def collective(self) -> "Collective":
        """Agrees shuffle seeds and step counts among the replicas."""

    def input_placement(self) -> InputPlacement:
        """Where this replica reads (pipelines, local replicas)."""

    def input_context(self) -> InputContext:
        """What a dataset function of this task receives."""


@dataclass(frozen=True)
class InputBinding:
    """An `InputHost` built from parts.

    Args:
        placement: where this replica reads (pipelines, local replicas).
        collective: agrees shuffle seeds and step counts among the replicas.
        device: where batches are delivered (CPU batches stay where they are).
        context: what a dataset function receives; default ``placement.input_context()``.

    Example (one process taking whole global batches, as CentralStorageStrategy's input does):
        >>> binding = InputBinding(InputPlacement(), LocalCollective())
        >>> binding.input_context().num_replicas_in_sync
        1
    """

    placement: InputPlacement
    collective: "Collective" = field(compare=False)
    device: torch.device = torch.device("cpu")
    context: Optional[InputContext] = None

    def input_placement(self) -> InputPlacement:
        return self.placement

    def input_context(self) -> InputContext:
        """The `InputContext` a dataset function of this task receives."""
        return self.context if self.context is not None else self.placement.input_context()
