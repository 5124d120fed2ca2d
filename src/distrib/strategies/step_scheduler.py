"""`StepScheduler`: what a strategy that runs steps on other tasks offers the training loop.

A strategy whose steps run where they are called (every replicated
strategy) has no scheduler: ``strategy.step_scheduler()`` is None and
`Model.fit` runs each step in this process. A strategy whose steps run on
other tasks (the parameter server's chief) returns one; the training loop
then wraps each execution of ``steps_per_execution`` steps in one scheduled
function, as tf.keras wraps its train function in ``coordinator.schedule``.

The scheduler is the `distrib.coordinator.ClusterCoordinator` of the
strategy; this protocol names the part of it the loop relies on, so the
loop never reads a strategy's internals.

Example (what the loop does with one, simplified):
    >>> scheduler = strategy.step_scheduler()
    >>> iterator = iter(scheduler.create_per_worker_dataset(make_dataset))
    >>> scheduler.share(loop)                       # module, optimizer, metrics created on the cluster now
    >>> value = scheduler.schedule(run_steps_on_a_worker, args=(loop, iterator, 5))
    >>> scheduler.join(); value.get()
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Protocol, Sequence, runtime_checkable

import torch

__all__ = ["StepScheduler", "ScheduledResult"]


@runtime_checkable
class ScheduledResult(Protocol):
    """The result of one scheduled function (a `RemoteValue`)."""

    def done(self) -> bool:
        """Whether the function has finished (successfully or not)."""

    def get(self) -> Any:
        """Its return value, waiting for it; raises the function's error."""


@runtime_checkable
class StepScheduler(Protocol):
    """Schedules functions on other tasks of the job (see the module docstring)."""

    def schedule(self, fn: Callable, args: Optional[Sequence] = None,
                 kwargs: Optional[Dict[str, Any]] = None) -> ScheduledResult:
        """Queue ``fn(*args, **kwargs)`` on some task; returns at once."""

    def join(self) -> None:
        """Wait until every scheduled function has finished; raise the first error."""

    def create_per_worker_dataset(self, dataset_fn: Any) -> Any:
        """A dataset built on every task that runs functions (``iter()`` it for their iterators)."""

    def share(self, *objects: Any) -> None:
        """Create the variables, modules, optimizers and metrics ``objects`` use on the tasks now.

        Afterwards reading or restoring their state (``state_dict``,
        ``load_state_dict``) reaches the copies the scheduled functions use.
        """

    def pull(self, module: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> None:
        """Copy the values training gave the variables into ``module`` and the step counts into
        ``optimizer`` (this task's copies), after the functions scheduled so far have finished."""

    @staticmethod
    def between_steps(tensors: Sequence[torch.Tensor]) -> None:
        """Called inside a scheduled function between two of its steps, with the module's parameters:
        a later step must see the updates of the earlier ones (a no-op where nothing needs refreshing)."""
