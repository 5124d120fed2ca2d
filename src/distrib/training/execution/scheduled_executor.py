"""`ScheduledExecutor`: each execution of the one loop runs as one scheduled function on a worker.

Used where the strategy has a `StepScheduler` (the parameter server's chief,
whose scheduler is its `ClusterCoordinator`). For each execution of up to
``steps_per_execution`` steps the loop's ``execute`` schedules one function
that runs those steps on whichever worker is free, as tf.keras wraps its
train function in ``coordinator.schedule``:

* the function carries the `Trainer` itself (its compiled state, see
  ``Trainer.__getstate__``): the module, optimizer and metrics travel
  by reference (each worker keeps one copy), the loss and metric container
  by value; it runs the loop's own step function (``model.train_step``)
  with ``strategy.run`` on the worker, re-reading the variables from the ps
  tasks between two of its steps (``scheduler.between_steps``);
* it returns its summed loss, examples and steps; metric states change on
  the worker and the scheduler adds their changes to the chief's metrics
  when it finishes;
* buffers (BatchNorm statistics) travel with it: it starts from the chief's
  buffers when scheduled, and its final buffers are copied back into the
  chief's module when it has finished, in scheduling order (a later
  function's values win, like unsynchronised assignments under TF).

`resolve` joins the scheduler and adds the returned losses to the loop's
tracker; the loop calls it before computing logs (epoch and evaluation ends,
and batch ends where a user's callback reads batch logs). A worker lost
mid-epoch costs only time: its function runs again on another worker.

Example (the loop's view; 20 steps with ``steps_per_execution=5``: 4 functions):
    >>> executor = ScheduledExecutor(loop, strategy.step_scheduler())
    >>> train, _ = executor.fit_inputs(dataset_fn, None, steps_per_epoch=20, ...)
    >>> for _ in range(4):
    ...     executor.execute(TRAIN, train.for_epoch(0, False), 5, on_begin=lambda: None)
    >>> executor.resolve()          # every step ran
    0
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from distrib.data.batch_split import leading_rows
from distrib.strategies.step_scheduler import ScheduledResult, StepScheduler
from distrib.training.execution import steps as step_fns
from distrib.training.execution.trainer_state import TrainerState
from distrib.training.execution.scheduled_input import (ScheduledEpochs, ScheduledEval, build_on_chief, dataset_recipe,
                                              per_worker_iterator, refuse_array_options, required_steps)
from distrib.training.execution.step_executor import StepExecutor
from distrib.training.execution.step_loop import TRAIN, Execution, Phase

__all__ = ["ScheduledExecutor", "run_execution", "batch_rows"]


def batch_rows(batch: Any) -> int:
    """The examples in ``batch``: the first dimension of its first input tensor.

    Example:
        >>> batch_rows(({"features": torch.ones(5, 3)}, torch.ones(5, 1)))
        5
    """
    return leading_rows(step_fns.unpack(batch)[0],
                        "fit under ParameterServerStrategy: a batch has no tensor with a batch dimension")


def _buffers(module: torch.nn.Module) -> Dict[str, torch.Tensor]:
    return {name: b.detach().clone() for name, b in module.named_buffers()}


def _load_buffers(module: torch.nn.Module, values: Dict[str, torch.Tensor]) -> None:
    """Copy ``values`` into ``module``'s buffers of the same names (shapes and dtypes are the module's)."""
    with torch.no_grad():
        for name, buffer in module.named_buffers():
            value = values.get(name)
            if value is not None and value.shape == buffer.shape:
                buffer.copy_(value.to(buffer.dtype))


def run_execution(loop: TrainerState, iterator: Iterator[Any], steps: int, phase: Phase,
                  buffers: Dict[str, torch.Tensor],
                  between_steps: Callable[[Sequence[torch.Tensor]], None]) -> Dict[str, Any]:
    """Runs on a worker: up to ``steps`` steps of ``phase``; returns the summed loss, examples, steps, buffers."""
    training = phase == TRAIN
    loop.loss_tracker.reset_state()
    loop.module.train(training)
    _load_buffers(loop.module, buffers)
    params = list(loop.module.parameters())
    step = loop.step_function(phase)
    done = 0
    for index in range(steps):
        try:
            batch = next(iterator)
        except StopIteration:
            break
        if training and index > 0:
            between_steps(params)
        step(batch, batch_rows(batch))
        done += 1
    return {"total": loop.loss_tracker.local_total().detach().cpu(), "count": loop.loss_tracker.count,
            "steps": done, "buffers": _buffers(loop.module) if training else {}}


class ScheduledExecutor(StepExecutor):
    """Schedules one function per execution (see the module docstring).

    Args:
        loop: the loop whose steps run.
        scheduler: the strategy's `StepScheduler`.
    """

    eager_batch_logs = False

    def __init__(self, loop: TrainerState, scheduler: StepScheduler) -> None:
        self.loop = loop
        self.scheduler = scheduler
        self._pending: List[Tuple[ScheduledResult, int]] = []
        self._buffers_taken = 0

    # -------------------------------------------------------------- input
    def fit_inputs(self, x: Any, y: Any, *, batch_size: Optional[int], shuffle: bool,
                   class_weight: Optional[Dict], sample_weight: Any, steps_per_epoch: Optional[int],
                   validation_data: Any, validation_split: float, validation_steps: Optional[int],
                   validation_batch_size: Optional[int] = None) -> Tuple[ScheduledEpochs, Optional[ScheduledEval]]:
        refuse_array_options("fit", batch_size=batch_size, class_weight=class_weight,
                             sample_weight=sample_weight, validation_split=validation_split,
                             validation_batch_size=validation_batch_size)
        steps = required_steps(steps_per_epoch, "steps_per_epoch", "fit")
        dataset_fn = dataset_recipe(x, y, "fit")
        val_fn = None
        if validation_data is not None:
            val_fn = dataset_recipe(validation_data, None, "fit(validation_data=...)")
            required_steps(validation_steps, "validation_steps", "fit")
        build_on_chief(self.loop, dataset_fn)
        train = ScheduledEpochs(per_worker_iterator(self.loop, self.scheduler, dataset_fn), steps)
        validation = None
        if val_fn is not None:
            validation = ScheduledEval(per_worker_iterator(self.loop, self.scheduler, val_fn),
                                       validation_steps)  # type: ignore[arg-type]
        self.scheduler.share(self.loop)  # before callbacks restore a backup into the optimizer's ps state
        return train, validation

    def eval_input(self, x: Any, y: Any, *, batch_size: Optional[int], sample_weight: Any,
                   steps: Optional[int]) -> ScheduledEval:
        refuse_array_options("evaluate", batch_size=batch_size, sample_weight=sample_weight)
        n = required_steps(steps, "steps", "evaluate")
        dataset_fn = dataset_recipe(x, y, "evaluate")
        build_on_chief(self.loop, dataset_fn)
        return ScheduledEval(per_worker_iterator(self.loop, self.scheduler, dataset_fn), n)

    # -------------------------------------------------------------- steps
    def execute(self, phase: Phase, iterator: Iterator[Any], steps: int,
                on_begin: Callable[[], None]) -> Execution:
        on_begin()
        self._take_buffers()
        remote = self.scheduler.schedule(run_execution, args=(self.loop, iterator, steps, phase,
                                                              _buffers(self.loop.module),
                                                              self.scheduler.between_steps))
        self._pending.append((remote, steps))
        return Execution(steps=steps)

    def resolve(self) -> int:
        if not self._pending:
            return 0
        self.scheduler.join()
        self._take_buffers()
        missing = 0
        tracker = self.loop.loss_tracker
        for remote, wanted in self._pending:
            result = remote.get()
            tracker.update(result["total"], 1)
            tracker.count_step(result["count"])
            missing += wanted - result["steps"]
        self._pending, self._buffers_taken = [], 0
        self.scheduler.pull(self.loop.module, self.loop.torch_optimizer)  # the chief's model reads as trained
        return missing

    def _take_buffers(self) -> None:
        """Copy the buffers of the functions finished so far, in scheduling order, into the chief's module."""
        while self._buffers_taken < len(self._pending) and self._pending[self._buffers_taken][0].done():
            remote, _ = self._pending[self._buffers_taken]
            try:
                buffers = remote.get()["buffers"]
            except Exception:  # noqa: BLE001 - the error surfaces from join()
                buffers = {}
            _load_buffers(self.loop.module, buffers)
            self._buffers_taken += 1
