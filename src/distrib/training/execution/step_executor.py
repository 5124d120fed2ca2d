"""The step-executor contract: how the one training loop's steps execute under a strategy.

`distrib.training.trainer.Trainer` runs fit, evaluate and predict the same way for every
strategy (`distrib.training.execution.fit_loop`, `distrib.training.execution.eval_loop`); what
differs is where the data is read and where the steps run. A `StepExecutor`
supplies both:

* the inputs: `fit_inputs` / `eval_input` turn what ``fit``/``evaluate``
  received into an `EpochInput` (the iterator of each epoch) and an
  `EvalInput` (the iterator of each evaluation);
* the steps: `execute` runs one execution of up to ``steps_per_execution``
  steps and returns an `Execution`; `resolve` waits for executions that
  may still be running elsewhere and adds their results (loss, metric
  states, buffers) to the loop's, returning how many of their steps did not
  run because the data ran out.

This module is the contract alone, below both executors, which implement
it. The trainer chooses one through `Strategy.step_scheduler`
(`distrib.training.trainer.executor_for`): without a scheduler (every replicated strategy) a
`distrib.training.execution.local_executor.LocalExecutor` runs each step here, now;
with one (the parameter server's chief) a
`distrib.training.execution.scheduled_executor.ScheduledExecutor` schedules one
function per execution on a worker and resolves the results when the loop
needs logs: at the end of an epoch or evaluation, and at the batch ends where
a callback of the user's reads batch logs (`eager_batch_logs` is False).

Example (one epoch of the loop, simplified):
    >>> executor = executor_for(loop)
    >>> train, _ = executor.fit_inputs(x, y, batch_size=32, ..., validation_data=None)
    >>> iterator = train.for_epoch(first_step=0, restored=False)
    >>> executor.execute(TRAIN, iterator, 5, on_begin=lambda: None).steps
    5
    >>> executor.resolve()      # all 5 steps ran
    0
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Optional, Protocol, Tuple

from distrib.training.execution.step_loop import Execution, Phase

__all__ = ["EpochInput", "EvalInput", "StepExecutor"]


class EpochInput(Protocol):
    """The training data of one `fit` call, epoch by epoch."""

    #: Steps per epoch, or None: until the data runs out.
    steps: Optional[int]
    #: True if the data may be shuffled (then `set_seed` gets a seed shared by every worker).
    needs_seed: bool

    def set_seed(self, seed: int) -> None:
        """The shuffle seed of this fit (drawn once, or restored)."""

    def for_epoch(self, first_step: int, restored: bool) -> Iterator[Any]:
        """The iterator of the epoch that starts at ``first_step`` (past 0 on a mid-epoch resume)."""

    def out_of_data(self, *, epoch: int, epoch_steps: int, needed: int, seen: int) -> Optional[str]:
        """The warning when epoch ``epoch`` ended after ``epoch_steps`` steps, fewer than asked (fit then
        stops); None where that is how an epoch ends (arrays: having warned itself, as Keras 3 does).
        ``needed``/``seen``: steps of the whole fit."""


class EvalInput(Protocol):
    """The data of one evaluation (``evaluate``, or fit's validation)."""

    #: Steps to run, or None: until the data runs out.
    steps: Optional[int]
    #: Steps between logs when ``model.log_every`` does not say (about 16 per evaluation).
    log_every: int

    def iterator(self) -> Iterator[Any]:
        """The iterator of one evaluation."""


class StepExecutor(Protocol):
    """How a strategy's steps execute (see the module docstring)."""

    #: False where computing logs waits for work running elsewhere: then batch logs are
    #: computed only for callbacks of the user's that read them.
    eager_batch_logs: bool

    def fit_inputs(self, x: Any, y: Any, *, batch_size: Optional[int], shuffle: bool,
                   class_weight: Optional[Dict], sample_weight: Any, steps_per_epoch: Optional[int],
                   validation_data: Any, validation_split: float, validation_steps: Optional[int],
                   validation_batch_size: Optional[int] = None) -> Tuple[EpochInput, Optional[EvalInput]]:
        """The training input and, if validation is asked for, the validation input of one `fit`."""

    def eval_input(self, x: Any, y: Any, *, batch_size: Optional[int], sample_weight: Any,
                   steps: Optional[int]) -> EvalInput:
        """The input of one `evaluate`."""

    def execute(self, phase: Phase, iterator: Iterator[Any], steps: int,
                on_begin: Callable[[], None]) -> Execution:
        """Run (or start) up to ``steps`` steps of ``phase`` on ``iterator``; ``on_begin()`` before the first."""

    def resolve(self) -> int:
        """Wait for the executions started so far and fold in their results; returns the steps that did not run."""

