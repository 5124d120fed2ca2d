"""`Strategy`: the small abstract interface every distribution strategy implements.

User code sees only these members (the tf.distribute surface). Code inside
distrib that is not a strategy reaches a strategy through two named
contracts:

* `distrib.data.InputHost` (a protocol every strategy satisfies): what the
  input layer needs -- this replica's `InputPlacement` (``input_placement()``),
  ``device``, ``collective`` and the `InputContext` a dataset function
  receives (``input_context()``); `InputBinding` builds one from parts;
* `checkpoint_role()` -> `distrib.checkpoint.CheckpointRole`: who writes
  checkpoints and where, and the collective checkpoint code agrees through;
* `step_scheduler()` -> a `distrib.strategies.step_scheduler.StepScheduler`
  where steps run on other tasks (the parameter server's chief), else None:
  how the training loop executes a step.

The implementations: `ReplicatedStrategy` (Default, OneDevice, Mirrored,
MultiWorkerMirrored: one process per replica around a collective),
`CentralStorageStrategy` (every replica in one process) and
`ParameterServerStrategy` (asynchronous, variables on ps tasks).

Example (a strategy works with anything that takes the contracts):
    >>> role = distrib.MirroredStrategy(["cpu:0"]).checkpoint_role()
    >>> role.is_chief, role.num_replicas_in_sync
    (True, 1)
"""
from __future__ import annotations

import abc
import contextlib
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence, Tuple

import torch

from distrib.comm.collective import Collective
from distrib.comm.options import CommunicationOptions
from distrib.data.distribution.input_context import InputContext, InputPlacement
from distrib.strategies.per_replica import PerReplica

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.checkpoint_role import CheckpointRole
    from distrib.strategies.step_scheduler import StepScheduler

__all__ = ["Strategy", "StrategyBoundState"]


class StrategyBoundState:
    """Marks objects whose state belongs to the strategy they were created under (metrics).

    The parameter-server strategy ships such an object to each worker once and
    keeps one copy there, instead of sending its value with every scheduled
    function; it recognises them by this base class, so strategies need not
    import the packages that define them.
    """

    distribute_strategy: "Strategy"


class Strategy(abc.ABC):
    """What every strategy offers: scope, run, reduce, gather and distributed input."""

    #: Task types a strategy accepts in its cluster; others are an error.
    supported_task_types: Tuple[str, ...] = ("chief", "worker", "evaluator")

    # ----------------------------------------------------------- identity
    @property
    @abc.abstractmethod
    def num_replicas_in_sync(self) -> int:
        """Replicas that take each synchronous step together."""

    @property
    @abc.abstractmethod
    def replica_id(self) -> int:
        """The replica this process (or, inside `run`, this call) computes for."""

    @property
    @abc.abstractmethod
    def cluster_resolver(self) -> Any:
        """The resolver describing the job (``task_type``, ``task_id``, ``cluster_spec()``), or None."""

    @property
    @abc.abstractmethod
    def is_chief(self) -> bool:
        """True on the task that writes checkpoints, summaries and progress."""

    @property
    @abc.abstractmethod
    def device(self) -> torch.device:
        """Where this replica's parameters live."""

    @property
    @abc.abstractmethod
    def collective(self) -> Collective:
        """How this process talks to the other replicas of the job."""

    @property
    def multi_replica(self) -> bool:
        """Whether this strategy takes the multi-replica path: more than one replica in sync, or an
        elastic job (which may grow from one worker: its one replica runs every collective and keys
        every random draw as a job of several does, so the workers that join replay its steps and
        the result is a fixed-size job's).

        Example:
            >>> distrib.get_strategy().multi_replica
            False
        """
        return self.num_replicas_in_sync > 1 or self.collective.elastic

    @property
    def should_checkpoint(self) -> bool:
        """True where checkpoints are written (the chief)."""
        return self.is_chief

    @property
    def communication_options(self) -> Optional[CommunicationOptions]:
        """The `CommunicationOptions` the strategy was built with; None for one that takes none."""
        return None

    @property
    def extended(self) -> "Strategy":
        """TF code reaches some attributes through ``strategy.extended``; here it is the strategy."""
        return self

    @property
    def comm_device(self) -> torch.device:
        """Where tensors must be to take part in this strategy's collectives."""
        return torch.device("cpu")

    # -------------------------------------------------------------- scope
    @abc.abstractmethod
    def scope(self) -> contextlib.AbstractContextManager:
        """Make this the current strategy; modules and optimizers created inside are distributed."""

    @abc.abstractmethod
    def track_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Adopt a module created outside `scope()`."""

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally inside this block (a no-op where nothing is exchanged)."""
        yield

    # ------------------------------------------------------ replica work
    @abc.abstractmethod
    def run(self, fn: Callable, args: Sequence = (), kwargs: Optional[dict] = None) -> Any:
        """Run ``fn(*args, **kwargs)`` as this strategy's replica(s)."""

    @abc.abstractmethod
    def reduce(self, reduce_op: Any, value: Any, axis: Optional[int] = None) -> Any:
        """Combine a per-replica ``value`` across replicas."""

    @abc.abstractmethod
    def gather(self, value: Any, axis: int = 0) -> Any:
        """Concatenate every replica's ``value`` along ``axis`` in replica order."""

    @abc.abstractmethod
    def experimental_local_results(self, value: Any) -> Tuple[Any, ...]:
        """One value per local replica of this task, in local replica order."""

    def own_results(self, value: Any) -> Tuple[Any, ...]:
        """The values this process itself holds (its replica's, or each replica's in one process)."""
        return value.values if isinstance(value, PerReplica) else (value,)

    def barrier(self) -> None:
        """Wait until every replica of the job reaches this point."""
        self.collective.barrier()

    # -------------------------------------------------------------- input
    def experimental_distribute_values_from_function(self, value_fn: Callable) -> Any:
        """``value_fn(ValueContext)`` for each replica of this process, ready for `run`.

        See `distrib.strategies.values`; ``experimental_local_results`` of the
        result gives this task's replicas' values in order.
        """
        from distrib.strategies.values import distribute_values

        return distribute_values(value_fn, self._replicas_in_process(), self.num_replicas_in_sync)

    def _replicas_in_process(self) -> Tuple[int, ...]:
        """The replica ids whose code this process runs (one, except for CentralStorage)."""
        return (self.replica_id,)

    @abc.abstractmethod
    def input_placement(self) -> InputPlacement:
        """This replica's task pipeline and local index (one pipeline per task, as in TF)."""

    def input_context(self) -> InputContext:
        """What ``distribute_datasets_from_function`` passes: one input pipeline per worker task."""
        return self.input_placement().input_context()

    @abc.abstractmethod
    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """Split each *global* batch of ``dataset`` among the replicas."""

    @abc.abstractmethod
    def distribute_datasets_from_function(self, dataset_fn: Callable, options: Any = None) -> Any:
        """Call ``dataset_fn(input_context)`` once per task; its batches go to the task's replicas."""

    # ---------------------------------------------------------- execution
    def step_scheduler(self) -> Optional["StepScheduler"]:
        """Where `Model.fit` sends its steps: None runs them in this process (every replicated strategy)."""
        return None

    # -------------------------------------------------------- checkpoints
    def checkpoint_role(self) -> "CheckpointRole":
        """The contract checkpoint code works against: who writes, where, and how to agree."""
        from distrib.strategies.checkpoint_role import CheckpointRole

        resolver = self.cluster_resolver
        return CheckpointRole(
            is_chief=self.is_chief, num_replicas_in_sync=self.num_replicas_in_sync,
            replica_id=self.replica_id, collective=self.collective, comm_device=self.comm_device,
            task_type=None if resolver is None else resolver.task_type,
            task_id=None if resolver is None else resolver.task_id)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_replicas_in_sync={self.num_replicas_in_sync}, "
                f"replica_id={self.replica_id}, device={self.device})")
