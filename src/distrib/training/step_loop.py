"""The one step loop that `fit` (each epoch), `evaluate` and `predict` run.

`run_steps` pulls ``(replica_batch, global_batch_size)`` pairs from an
iterator, runs a step function on each, and calls the phase's batch hooks
(``on_train_batch_*``, ``on_test_batch_*`` or ``on_predict_batch_*``) once
per *execution* of ``steps_per_execution`` steps: ``on_*_batch_begin`` with
the execution's first step index before it runs, ``on_*_batch_end`` with its
last step index after (Keras 3's convention). Logs are computed — at the
same steps on every worker, since computing them is a collective — only when
an execution crosses a multiple of ``log_every`` or ends the loop; the other
``on_*_batch_end`` calls get ``None``.

The loop ends after ``steps`` steps (None: when the iterator runs out), when
the iterator runs out, or when ``should_stop()`` says so after an
execution (``model.stop_training`` in `fit`).

Example (``steps=3``, ``steps_per_execution=2``, ``log_every=16``):
    on_train_batch_begin(0); step 0; step 1; on_train_batch_end(1, None)
    on_train_batch_begin(2); step 2; on_train_batch_end(2, logs)   # last step: logs computed
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

__all__ = ["Phase", "StepLoopResult", "run_steps", "default_log_every"]

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
class StepLoopResult:
    """How a `run_steps` call ended.

    Attributes:
        step: the index of the next step (``first_step`` plus the steps run).
        exhausted: True if the iterator ran out before ``steps`` steps.
        logs: the logs handed to the last ``on_*_batch_end``, or None if that call got none.
    """

    step: int
    exhausted: bool
    logs: Logs


def run_steps(*, phase: Phase, callbacks: Any, iterator: Iterator[Tuple[Any, int]],
              step_fn: Callable[[Any, int], Any], steps: Optional[int], log_every: int,
              batch_logs: Callable[[List[Any]], Logs], first_step: int = 0, steps_per_execution: int = 1,
              after_step: Optional[Callable[[int], None]] = None,
              should_stop: Callable[[], bool] = lambda: False) -> StepLoopResult:
    """Run steps ``first_step, first_step + 1, ...`` (see the module docstring).

    Args:
        phase: whose batch hooks to call.
        callbacks: a `CallbackList`.
        iterator: yields ``(replica_batch, global_batch_size)``.
        step_fn: ``step_fn(batch, global_batch_size)`` runs one step; its results
            for one execution are passed to ``batch_logs``.
        steps: steps to reach (an index bound, counting from 0), or None for "until exhausted".
        log_every: logs are computed when an execution reaches a multiple of this.
        batch_logs: ``batch_logs(results_of_the_execution)`` gives the logs (a collective in fit/evaluate).
        first_step: the index of the first step (a mid-epoch resume starts past 0).
        steps_per_execution: steps between a begin hook and its end hook.
        after_step: called with the count of steps done after each step (fit's position bookkeeping).
        should_stop: checked after each execution; True ends the loop.
    """
    begin_hook, end_hook = phase.hooks(callbacks)
    step, logs, exhausted = first_step, None, False
    while steps is None or step < steps:
        begin = step
        end = begin + steps_per_execution if steps is None else min(begin + steps_per_execution, steps)
        results: List[Any] = []
        while step < end:
            try:
                batch, global_batch_size = next(iterator)
            except StopIteration:
                exhausted = True
                break
            if step == begin:
                begin_hook(begin)
            results.append(step_fn(batch, global_batch_size))
            step += 1
            if after_step is not None:
                after_step(step)
        if step == begin:
            break
        due = (steps is not None and step == steps) or step // log_every > begin // log_every
        logs = batch_logs(results) if due else None
        end_hook(step - 1, logs)
        if exhausted or should_stop():
            break
    return StepLoopResult(step=step, exhausted=exhausted, logs=logs)


def default_log_every(steps: Optional[int]) -> int:
    """Steps between progress/log updates: about 16 per epoch when its length is known.

    Example:
        >>> default_log_every(70), default_log_every(5), default_log_every(None)
        (5, 1, 20)
    """
    if steps is None:
        return 20
    return max(1, -(-int(steps) // 16))
