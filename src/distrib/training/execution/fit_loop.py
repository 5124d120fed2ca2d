"""`run_fit`: the epochs of `Model.fit`, for every strategy.

Per epoch: reset the metrics (a mid-epoch resume keeps the restored ones),
``on_epoch_begin``, the steps (`distrib.training.execution.step_loop.run_steps`, each
execution run by the strategy's step executor), then `resolve` (wait for
steps still running elsewhere), the epoch's logs, validation every
``validation_freq`` epochs (``val_`` logs) and ``on_epoch_end``. An epoch
that ran out of data warns and stops training after its end hooks.

Resume: ``on_train_begin`` runs first; if a callback restored
``train_loop_state`` (`BackupAndRestore`), fit starts from its epoch and
step, applying the restored data position to the iterator it belongs to.

``stop_training`` is agreed by every worker at each epoch end, and after
every execution too when some worker runs the user's code during the epoch
(`distrib.training.execution.stop_agreement`).

Example (what a recording callback sees: 1 epoch of 3 steps, ``steps_per_execution=2``, validation):
    on_train_begin; on_epoch_begin(0)
    on_train_batch_begin(0); on_train_batch_end(1); on_train_batch_begin(2); on_train_batch_end(2)
    on_test_begin; on_test_batch_begin(0); on_test_batch_end(0); on_test_end
    on_epoch_end(0, {"loss", "val_loss"}); on_train_end
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, Optional, Tuple

from distrib.optimizers.optimizer_parts import finalizer_of
from distrib.training.execution.eval_loop import run_evaluation
from distrib.training.execution.fit_data import draw_seed, should_validate
from distrib.training.execution.trainer_state import TrainerState
from distrib.training.execution.step_executor import EpochInput, EvalInput, StepExecutor
from distrib.training.execution.step_loop import TRAIN, batch_logs_for, default_log_every, run_steps
from distrib.training.execution.stop_agreement import may_stop_during_epoch

__all__ = ["run_fit"]

Logs = Dict[str, Any]


def run_fit(loop: TrainerState, executor: StepExecutor, train: EpochInput, validation: Optional[EvalInput], *,
            epochs: int, initial_epoch: int, validation_freq: Any, callbacks: Any, verbose: Any) -> Any:
    """Train ``epochs - initial_epoch`` epochs (see the module docstring); returns the `History`."""
    state = loop.train_loop_state
    steps = train.steps
    log_every = loop.log_every or default_log_every(steps)
    cbs = loop.make_callbacks(callbacks, verbose, fit=True, epochs=epochs, steps=steps, log_every=log_every)
    loop.stop_training = False
    collective = loop.strategy.collective
    stop_each_step = collective.distributed and collective.agree_any(
        may_stop_during_epoch(cbs.callbacks, loop))
    should_stop = loop.agreed_stop if stop_each_step else loop.local_stop
    state.epoch, state.step_in_epoch, state.epoch_done = initial_epoch, 0, False
    loop.module.train()
    loop.torch_optimizer.zero_grad(set_to_none=True)  # type: ignore[union-attr]
    cbs.on_train_begin()
    restored = state.consume_restored()
    start_epoch, start_step = state.resume_point() if restored else (initial_epoch, 0)
    if not (restored and state.shuffle_seed is not None):
        state.shuffle_seed = draw_seed(loop.strategy) if train.needs_seed else 0
    train.set_seed(state.shuffle_seed)
    first_global_step = state.global_step - (start_epoch - initial_epoch) * (steps or 0) - start_step
    logs: Optional[Logs] = None
    for epoch in range(start_epoch, epochs):
        first_step = start_step if epoch == start_epoch else 0
        logs, epoch_steps, out_of_data = _run_epoch(loop, executor, train, cbs, epoch, first_step,
                                                    restored and epoch == start_epoch, log_every, should_stop)
        if validation is not None and should_validate(epoch, validation_freq):
            val_logs = run_evaluation(loop, executor, validation, cbs, validation.log_every, stacklevel=4)
            logs.update({f"val_{k}": v for k, v in val_logs.items()})
            loop.module.train()
        state.epoch_done = True
        cbs.on_epoch_end(epoch, logs)
        if out_of_data:
            message = train.out_of_data(epoch=epoch, epoch_steps=epoch_steps,
                                        needed=(steps or 0) * (epochs - initial_epoch),
                                        seen=state.global_step - first_global_step)
            if message is not None:
                warnings.warn(message, stacklevel=4)
                loop.stop_training = True
        if loop.agreed_stop():
            break
    state.attach_iterator(None)
    finalize = finalizer_of(loop.optimizer)
    if finalize is not None and epochs > initial_epoch:
        finalize(None)  # use_ema: the weights become their moving averages, as Keras's fit does
    cbs.on_train_end(logs)
    return loop.history


def _run_epoch(loop: TrainerState, executor: StepExecutor, train: EpochInput, cbs: Any, epoch: int,
               first_step: int, restored: bool, log_every: int,
               should_stop: Callable[[], bool]) -> Tuple[Logs, int, bool]:
    """One epoch; returns its logs, the steps it ran to and whether its data ran out early."""
    state = loop.train_loop_state
    if not (restored and first_step > 0):
        loop.reset_metrics()  # a mid-epoch resume keeps the restored metric state
    state.epoch, state.step_in_epoch, state.epoch_done = epoch, first_step, False
    cbs.on_epoch_begin(epoch)
    iterator = train.for_epoch(first_step, restored)
    base = state.global_step - first_step

    def after_execution(step: int) -> None:
        state.step_in_epoch, state.global_step = step, base + step

    result = run_steps(phase=TRAIN, callbacks=cbs,
                       execute=lambda n, on_begin: executor.execute(TRAIN, iterator, n, on_begin),
                       steps=train.steps, log_every=log_every, first_step=first_step,
                       batch_logs=batch_logs_for(executor.eager_batch_logs, executor.resolve, loop.compute_logs,
                                                 cbs.callbacks),
                       steps_per_execution=loop.steps_per_execution, after_execution=after_execution,
                       should_stop=should_stop)
    missing = executor.resolve()
    if missing:
        after_execution(result.step - missing)
    logs = dict(result.logs) if result.logs is not None else loop.compute_logs()
    return logs, result.step - missing, result.exhausted or missing > 0
