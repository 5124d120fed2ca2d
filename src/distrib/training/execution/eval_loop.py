"""`run_evaluation` and `run_predict`: evaluate (and fit's validation) and predict over the one step loop.

Evaluation resets the metrics, runs ``test_step`` over its input with the
strategy's step executor, resolves what still runs elsewhere and returns the
global logs, between ``on_test_begin`` and ``on_test_end``. Prediction runs
``predict_step`` in this process for every strategy (the predictions are
wanted here) and assembles them in input order (`distrib.training.execution.predict_output`).
Asked for more steps than the data holds, both cover what it holds and warn,
as Keras 3 does.

Example:
    >>> logs = run_evaluation(loop, executor, executor.eval_input(x, y, batch_size=8, sample_weight=None,
    ...                                                           steps=None), cbs, log_every=1)
    >>> sorted(logs)
    ['loss']
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, List

from distrib.training.execution.trainer_state import TrainerState
from distrib.training.execution.predict_output import assemble, concat, rows_of
from distrib.training.execution.step_executor import EvalInput, StepExecutor
from distrib.training.execution.step_loop import PREDICT, TEST, batch_logs_for, run_steps

__all__ = ["RAN_OUT_WARNING", "run_evaluation", "run_predict"]

Logs = Dict[str, Any]

RAN_OUT_WARNING = ("Your input ran out of data: {ran} of the {steps} steps asked for ran (the data holds no more "
                   "batches), and the {what} covers those, as in Keras 3. Pass fewer steps, or a repeated dataset.")


def _warn_if_short(result: Any, steps: Any, what: str, stacklevel: int) -> None:
    if result.exhausted and steps is not None and result.step < steps:
        warnings.warn(RAN_OUT_WARNING.format(ran=result.step, steps=steps, what=what), stacklevel=stacklevel + 1)


def run_evaluation(loop: TrainerState, executor: StepExecutor, data: EvalInput, cbs: Any, log_every: int,
                   stacklevel: int = 3) -> Logs:
    """The test loop over ``data`` (evaluate, or fit's validation); returns the global logs.

    ``stacklevel``: the user's frame for a warning, counted from here (3: ``evaluate``'s caller).
    """
    was_training = loop.module.training
    loop.module.eval()
    loop.reset_metrics()
    cbs.on_test_begin()
    iterator = data.iterator()
    try:
        result = run_steps(phase=TEST, callbacks=cbs,
                           execute=lambda n, on_begin: executor.execute(TEST, iterator, n, on_begin),
                           steps=data.steps, log_every=log_every,
                           batch_logs=batch_logs_for(executor.eager_batch_logs, executor.resolve,
                                                     loop.compute_logs, cbs.callbacks),
                           steps_per_execution=loop.steps_per_execution)
        executor.resolve()
        _warn_if_short(result, data.steps, "evaluation", stacklevel)
        logs = dict(result.logs) if result.logs is not None else loop.compute_logs()
    finally:
        loop.module.train(was_training)
    cbs.on_test_end(logs)
    return logs


def run_predict(loop: TrainerState, executor: StepExecutor, data: EvalInput, cbs: Any, log_every: int) -> Any:
    """Every prediction of ``data``, in input order, as numpy arrays on every worker."""
    outputs: List[Any] = []
    iterator = data.iterator()

    def execute(n: int, on_begin: Any) -> Any:
        done = executor.execute(PREDICT, iterator, n, on_begin)
        outputs.extend(done.results)
        return done

    was_training = loop.module.training
    loop.module.eval()
    cbs.on_predict_begin()
    try:
        ran = run_steps(phase=PREDICT, callbacks=cbs, execute=execute, steps=data.steps, log_every=log_every,
                        steps_per_execution=loop.steps_per_execution,
                        batch_logs=lambda ys: {"outputs": ys[0] if len(ys) == 1 else concat(ys)})
        _warn_if_short(ran, data.steps, "prediction", 3)
    finally:
        loop.module.train(was_training)
    result = assemble(loop.strategy, outputs, [rows_of(y) for y in outputs])
    cbs.on_predict_end()
    return result
