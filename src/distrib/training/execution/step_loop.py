"""The one step loop that `fit` (each epoch), `evaluate` and `predict` run, whatever the strategy.

`run_steps` asks an ``execute`` function to run *executions* of up to
``steps_per_execution`` steps and calls the phase's batch hooks
(``on_train_batch_*``, ``on_test_batch_*`` or ``on_predict_batch_*``) once
per execution: ``on_*_batch_begin`` with the execution's first step index
before it runs, ``on_*_batch_end`` with its last step index after (Keras 3's
convention). How an execution runs is the step executor's business
(`distrib.training.execution.step_executor`): in this process, or scheduled as one
function on a parameter-server worker. Logs are computed only when an
execution crosses a multiple of ``log_every`` or ends the loop (at the same
steps on every worker, since computing them is a collective); the other
``on_*_batch_end`` calls get ``None``.

The loop ends after ``steps`` steps (None: when the data runs out), when an
execution runs fewer steps than asked (the data ran out), or when
``should_stop()`` says so after an execution (``model.stop_training`` in `fit`).

Example (``steps=3``, ``steps_per_execution=2``, ``log_every=16``):
    on_train_batch_begin(0); step 0; step 1; on_train_batch_end(1, None)
    on_train_batch_begin(2); step 2; on_train_batch_end(2, logs)   # last step: logs computed
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from distrib.training.execution.stop_agreement import reads_batch_logs

__all__ = ["Phase", "TRAIN", "TEST", "PREDICT", "Execution", "Execute", "StepLoopResult", "run_steps",
           "batch_logs_for", "default_log_every"]

Logs = Optional[Dict[str, Any]]


@dataclass(frozen=True)
class Phase:
    """Which callback hooks a loop calls: ``"train"``, ``"test"`` or ``"predict"``."""

    name: str

    def hooks(self, callbacks: Any) -> Tuple[Callable[..., Any], Callable[..., Any]]:
        """``(on_<name>_batch_begin, on_<name>_batch_end)`` of ``callbacks``."""
        if self.name not in ("train", "test", "predict"):
            raise ValueError(f"Phase name must be 'train', 'test' or 'predict', got {self.name!r}")
        return (getattr(callbacks, f"on_{self.name}_batch_begin"),
                getattr(callbacks, f"on_{self.name}_batch_end"))


TRAIN, TEST, PREDICT = Phase("train"), Phase("test"), Phase("predict")


@dataclass
class Execution:
    """What one execution did: the steps it ran (fewer than asked: the data ran out) and their results."""

    steps: int
    results: List[Any] = field(default_factory=list)


#: ``execute(steps, on_begin) -> Execution``: run up to ``steps`` steps, calling ``on_begin()`` before the
#: first one (not at all if there is no data left).
Execute = Callable[[int, Callable[[], None]], Execution]


@dataclass
class StepLoopResult:
    """How a `run_steps` call ended.

    Attributes:
        step: the index of the next step (``first_step`` plus the steps run).
        exhausted: True if the data ran out before ``steps`` steps.
        logs: the logs handed to the last ``on_*_batch_end``, or None if that call got none.
    """

    step: int
    exhausted: bool
    logs: Logs


def run_steps(*, phase: Phase, callbacks: Any, execute: Execute, steps: Optional[int], log_every: int,
              batch_logs: Callable[[List[Any]], Logs], first_step: int = 0, steps_per_execution: int = 1,
              after_execution: Optional[Callable[[int], None]] = None,
              should_stop: Callable[[], bool] = lambda: False) -> StepLoopResult:
    """Run steps ``first_step, first_step + 1, ...`` (see the module docstring).

    Args:
        phase: whose batch hooks to call.
        callbacks: a `CallbackList`.
        execute: runs one execution (see `Execute`); its results are passed to ``batch_logs``.
        steps: steps to reach (an index bound, counting from 0), or None for "until exhausted".
        log_every: logs are computed when an execution reaches a multiple of this.
        batch_logs: ``batch_logs(results_of_the_execution)`` gives the logs (a collective in fit/evaluate).
        first_step: the index of the first step (a mid-epoch resume starts past 0).
        steps_per_execution: steps between a begin hook and its end hook.
        after_execution: called with the count of steps done after each execution (fit's bookkeeping).
        should_stop: checked after each execution; True ends the loop.
    """
    begin_hook, end_hook = phase.hooks(callbacks)
    step, logs, exhausted = first_step, None, False
    while steps is None or step < steps:
        begin = step
        wanted = steps_per_execution if steps is None else min(steps_per_execution, steps - begin)
        done = execute(wanted, lambda: begin_hook(begin))
        if done.steps == 0:
            exhausted = True
            break
        step += done.steps
        exhausted = done.steps < wanted
        if after_execution is not None:
            after_execution(step)
        due = (steps is not None and step == steps) or step // log_every > begin // log_every
        logs = batch_logs(done.results) if due else None
        end_hook(step - 1, logs)
        if exhausted or should_stop():
            break
    return StepLoopResult(step=step, exhausted=exhausted, logs=logs)


def batch_logs_for(eager: bool, resolve: Callable[[], int], compute_logs: Callable[[], Dict[str, Any]],
                   callbacks: Any) -> Callable[[List[Any]], Logs]:
    """What a due ``on_*_batch_end`` gets: logs where computing them is cheap (``eager``: the steps ran
    here) or where a callback of the user's has a batch-end hook (then ``resolve()`` first waits for the
    steps still running elsewhere); else None."""
    if not (eager or reads_batch_logs(callbacks)):
        return lambda _: None

    def logs(_: List[Any]) -> Logs:
        resolve()
        return compute_logs()
    return logs


def default_log_every(steps: Optional[int]) -> int:
    """Steps between progress/log updates: about 16 per epoch when its length is known.

    Example:
        >>> default_log_every(70), default_log_every(5), default_log_every(None)
        (5, 1, 20)
    """
    if steps is None:
        return 20
    return max(1, -(-int(steps) // 16))
