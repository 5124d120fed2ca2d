"""`TrainingLoop`: a model's compiled state and the one step loop behind fit, evaluate and predict.

A `distrib.Model` is a thin facade over one `TrainingLoop` (``model.loop``).
The loop owns what ``compile`` resolves (optimizer, loss, metrics, the loss
tracker, ``steps_per_execution``), the strategy, the callbacks of the call
in progress, ``stop_training``, ``history`` and the `TrainLoopState` that
`BackupAndRestore` saves. `fit` (each epoch, and its validation),
`evaluate` and `predict` all run `distrib.training.step_loop.run_steps`; they
differ only in the step function, the data, the callback hooks and the stop
condition.

Per step every replica runs ``train_step`` / ``test_step`` /
``predict_step`` (looked up on the owner, so a `Model` subclass may override
them) on its part of one global batch; nothing per step forces a host sync
or a collective beyond the gradient all-reduce. Logs (global loss and
metrics, one collective) are computed every ``log_every`` steps and at the
end of each epoch, at the same steps on every worker.

Resume: `fit` calls ``on_train_begin`` first, then starts from
``train_loop_state`` if a callback restored it (`BackupAndRestore`),
applying the restored iterator position to the iterator it belongs to, so a
resumed run sees exactly the batches the interrupted one would have seen.

Example (the loop without the facade; callbacks then see the loop as ``self.model``):
    >>> loop = TrainingLoop(torch.nn.Linear(1, 1), distrib.get_strategy(), name="linear")
    >>> loop.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    >>> sorted(loop.fit(np.ones((8, 1)), np.ones((8, 1)), batch_size=2, epochs=1, verbose=0).history)
    ['loss']
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from distrib.comm.optimizer_hook import unreplicated_steps
from distrib.strategies import context, replica_process
from distrib.training import model_state, steps as step_fns
from distrib.training.callback_setup import make_callback_list, resolve_verbose
from distrib.training.compile_config import CompiledLoss, CompiledMetrics, resolve_optimizer
from distrib.training.data_adapter import DataHandler, make_handler
from distrib.training.fit_data import (OUT_OF_DATA_WARNING, EpochIterators, draw_seed, should_validate,
                                       split_arrays, split_validation, validate_fit_args)
from distrib.training.global_logs import global_logs
from distrib.training.loop_state import TrainLoopState
from distrib.training.loss_tracker import LossTracker
from distrib.training.predict_output import assemble, concat, rows_of
from distrib.training.serialization import to_spec
from distrib.training.stop_agreement import may_stop_during_epoch
from distrib.training.step_loop import PREDICT, TEST, TRAIN, default_log_every, run_steps
from distrib.utils.pending_restore import PendingRestore

__all__ = ["TrainingLoop"]

Logs = Dict[str, Any]


class TrainingLoop:
    """Compiled state plus fit / evaluate / predict over one step loop.

    Args:
        module: the network.
        strategy: the strategy every call runs under.
        name: used in error messages.
        owner: what callbacks see as ``self.model`` and where the step
            functions are looked up (the `distrib.Model`); defaults to the loop.
    """

    def __init__(self, module: torch.nn.Module, strategy: Any, *, name: str, owner: Any = None) -> None:
        self.module = module
        self.strategy = strategy
        self.name = name
        self.owner: Any = owner if owner is not None else self
        self.train_loop_state = TrainLoopState()
        #: Steps between log/progress updates; None: about 16 per epoch.
        self.log_every: Optional[int] = None
        self.stop_training = False
        self.history: Any = None
        #: The `CallbackList` of the fit/evaluate/predict call in progress (or the last one).
        self.callbacks: Any = None
        self.compile_args: Optional[Dict[str, Any]] = None
        self.steps_per_execution = 1
        self.optimizer: Any = None
        self.torch_optimizer: Optional[torch.optim.Optimizer] = None
        #: fit's loss scaling under the mixed_float16 policy (made on first use).
        self.loss_scale_optimizer: Any = None
        self.compiled_loss: Optional[CompiledLoss] = None
        self.compiled_metrics: Optional[CompiledMetrics] = None
        self.loss_tracker = LossTracker(strategy)
        #: Metric state restored before the metrics were built (applied on the first batch).
        self.metric_restore: PendingRestore[Dict[str, Any]] = PendingRestore()

    # ----------------------------------------------------------- compile
    @property
    def distribute_strategy(self) -> Any:
        return self.strategy

    @property
    def compiled(self) -> bool:
        return self.compile_args is not None

    @property
    def loss(self) -> Any:
        """The ``loss`` given to `compile`."""
        return None if self.compile_args is None else self.compile_args["loss"]

    @property
    def metrics(self) -> List[Any]:
        """The loss tracker followed by the compiled metric objects."""
        entries = self.compiled_metrics.entries if self.compiled_metrics is not None else []
        return [self.loss_tracker] + [m for _, _, m in entries]

    @property
    def metrics_names(self) -> List[str]:
        """``["loss", <metric log names>...]``: the order of `evaluate`'s list result."""
        entries = self.compiled_metrics.entries if self.compiled_metrics is not None else []
        return ["loss"] + [name for _, name, _ in entries]

    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Any = None, loss_weights: Any = None,
                steps_per_execution: int = 1) -> None:
        """See `distrib.Model.compile`."""
        self.check_scope("compile")
        if isinstance(steps_per_execution, bool) or not isinstance(steps_per_execution, int) \
                or steps_per_execution < 1:
            raise ValueError(f"compile(steps_per_execution=...) must be a positive int, got {steps_per_execution!r}")
        with self.strategy.scope():
            self.compiled_loss = None if loss is None else CompiledLoss(loss, loss_weights)
            if self.compiled_loss is None and metrics:
                raise ValueError("compile(metrics=...) without a loss: give compile(loss=...) too")
            placeholder = self.compiled_loss or CompiledLoss("mse", None)
            self.compiled_metrics = CompiledMetrics(metrics, placeholder)
            step_fns.apply_variable_dtype(self.module)
            params = [p for p in self.module.parameters() if p.requires_grad]
            self.optimizer, self.torch_optimizer = resolve_optimizer(optimizer, params)
            self.loss_scale_optimizer = step_fns.wrap_for_loss_scaling(self)
        self.loss_tracker = LossTracker(self.strategy)
        self.steps_per_execution = steps_per_execution
        self.compile_args = {"optimizer": optimizer, "loss": loss, "metrics": metrics, "loss_weights": loss_weights}
        self.metric_restore.apply(self.apply_metric_state)

    def get_compile_config(self) -> Optional[Dict[str, Any]]:
        """The compile arguments as JSON specs (see `distrib.training.serialization`)."""
        if self.compile_args is None:
            return None
        return {k: to_spec(v, f"compile({k}=...)") for k, v in self.compile_args.items()}

    def check_scope(self, what: str) -> None:
        """Raise if ``model.<what>()`` runs under another strategy's scope, or alone in a multi-worker job."""
        current = context.current_scope_strategy()
        if current is not None and current is not self.strategy:
            raise RuntimeError(
                f"model.{what}() called under {type(current).__name__}.scope() but the model was created "
                f"under {type(self.strategy).__name__}: create (and compile) the model inside the scope of "
                "the strategy that runs it")
        # Only training alone is refused: evaluating/predicting an unreplicated model is TF's behaviour too.
        # In a local-replica process an unreplicated model trains as in TF's one process (replica_process).
        if (what == "fit" and self.strategy.num_replicas_in_sync == 1 and _distributed_world_size() > 1
                and replica_process.current() is None):
            raise RuntimeError(
                f"model.{what}(): this process is one of {_distributed_world_size()} workers but the model was "
                "created outside any strategy scope, so it would train alone; create it inside "
                "`with strategy.scope():`")

    def _unreplicated_training(self) -> Any:
        """An unreplicated model trained in a local-replica process trains there on purpose (replica_process); its weights must agree."""
        if self.strategy.num_replicas_in_sync == 1 and replica_process.current() is not None:
            replica_process.check_same_weights(self.module, "model.fit()")
            return unreplicated_steps()
        return contextlib.nullcontext()

    def require_compiled(self, what: str) -> None:
        """Raise unless `compile` ran (with a loss, for fit and evaluate)."""
        if self.compile_args is None:
            raise RuntimeError(f"model.{what}() needs a compiled model: call model.compile(optimizer=..., "
                               f"loss=...) first")
        if self.compiled_loss is None and what in ("fit", "evaluate"):
            raise RuntimeError(f"model.{what}() needs a loss: call model.compile(loss=...) with a loss")

    # ------------------------------------------------------------ steps
    def train_step(self, data: Any, global_batch_size: int) -> torch.Tensor:
        return step_fns.train_step(self, data, global_batch_size)

    def test_step(self, data: Any, global_batch_size: int) -> torch.Tensor:
        return step_fns.test_step(self, data, global_batch_size)

    def predict_step(self, x: Any) -> Any:
        return step_fns.predict_step(self, x)

    def reset_metrics(self) -> None:
        """Reset the loss tracker and every compiled metric."""
        self.loss_tracker.reset_state()
        if self.compiled_metrics is not None:
            self.compiled_metrics.reset_state()

    def compute_logs(self) -> Logs:
        """``{"loss": ..., <metric>: ...}`` over all replicas (collective: call on every worker)."""
        entries = self.compiled_metrics.entries if self.compiled_metrics is not None else []
        return global_logs(self.strategy, self.loss_tracker, [(name, m) for _, name, m in entries])

    def apply_metric_state(self, pending: Dict[str, Any]) -> None:
        """Restore metric states now, or on the first batch if the metrics are not built yet."""
        model_state.apply_metric_state(self, pending)

    # -------------------------------------------------------------- fit
    def fit(self, x: Any = None, y: Any = None, batch_size: Optional[int] = None, epochs: int = 1,
            verbose: Any = "auto", callbacks: Any = None, validation_data: Any = None,
            validation_steps: Optional[int] = None, validation_freq: Any = 1, initial_epoch: int = 0,
            steps_per_epoch: Optional[int] = None, shuffle: bool = True, class_weight: Optional[Dict] = None,
            sample_weight: Any = None, validation_split: float = 0.0) -> Any:
        """See `distrib.Model.fit`; returns the `History`."""
        self.check_scope("fit")
        self.require_compiled("fit")
        validate_fit_args(epochs, initial_epoch, steps_per_epoch, validation_freq, validation_split)
        state = self.train_loop_state
        with self.strategy.scope(), self._unreplicated_training():
            if validation_split and validation_data is None:
                (x, y, sample_weight), validation_data = split_arrays(x, y, sample_weight, validation_split)
            handler = self._handler(x, y, sample_weight, batch_size, shuffle, class_weight, "fit")
            val_handler = None
            if validation_data is not None:
                vx, vy, vsw = split_validation(validation_data)
                val_handler = self._handler(vx, vy, vsw, batch_size, False, None, "evaluate")
            iterators = EpochIterators(handler, steps_per_epoch, state)
            steps = iterators.steps
            log_every = self.log_every or default_log_every(steps)
            cbs = self._callback_list(callbacks, verbose, fit=True, epochs=epochs, steps=steps, log_every=log_every)
            self.stop_training = False
            collective = self.strategy.collective
            stop_each_step = collective.world_size > 1 and collective.agree_any(
                may_stop_during_epoch(cbs.callbacks, self.owner))
            should_stop = self._agreed_stop if stop_each_step else self._local_stop
            state.epoch, state.step_in_epoch, state.epoch_done = initial_epoch, 0, False
            self.module.train()
            self.torch_optimizer.zero_grad(set_to_none=True)  # type: ignore[union-attr]
            cbs.on_train_begin()
            restored = state.consume_restored()
            start_epoch, start_step = state.resume_point() if restored else (initial_epoch, 0)
            if not (restored and state.shuffle_seed is not None):
                state.shuffle_seed = draw_seed(self.strategy) if handler.needs_seed else 0
            handler.seed = state.shuffle_seed
            first_global_step = state.global_step - (start_epoch - initial_epoch) * (steps or 0) - start_step
            logs: Optional[Logs] = None
            for epoch in range(start_epoch, epochs):
                first_step = start_step if epoch == start_epoch else 0
                logs, out_of_data = self._run_epoch(cbs, iterators, epoch, first_step,
                                                    restored and epoch == start_epoch, steps, log_every,
                                                    should_stop)
                if val_handler is not None and should_validate(epoch, validation_freq):
                    val_log_every = default_log_every(validation_steps or val_handler.steps_per_pass)
                    val_logs = self._evaluate_handler(val_handler, validation_steps, cbs, val_log_every)
                    logs.update({f"val_{k}": v for k, v in val_logs.items()})
                    self.module.train()
                state.epoch_done = True
                cbs.on_epoch_end(epoch, logs)
                if out_of_data:
                    warnings.warn(OUT_OF_DATA_WARNING.format(needed=(steps or 0) * (epochs - initial_epoch),
                                                             seen=state.global_step - first_global_step),
                                  stacklevel=3)
                    self.stop_training = True
                if self._agreed_stop():
                    break
            state.attach_iterator(None)
            finalize = getattr(self.optimizer, "finalize_variable_values", None)
            if finalize is not None and epochs > initial_epoch:
                finalize(None)  # use_ema: the weights become their moving averages, as Keras's fit does
            cbs.on_train_end(logs)
        return self.history

    def _run_epoch(self, cbs: Any, iterators: EpochIterators, epoch: int, first_step: int, restored: bool,
                   steps: Optional[int], log_every: int, should_stop: Callable[[], bool]) -> Tuple[Logs, bool]:
        """One epoch; returns its logs and whether the shared iterator ran out early."""
        state = self.train_loop_state
        if not (restored and first_step > 0):
            self.reset_metrics()  # a mid-epoch resume keeps the restored metric state
        state.epoch, state.step_in_epoch, state.epoch_done = epoch, first_step, False
        cbs.on_epoch_begin(epoch)
        iterator = iterators.for_epoch(first_step, restored)

        def after_step(step: int) -> None:
            state.step_in_epoch = step
            state.global_step += 1

        result = run_steps(phase=TRAIN, callbacks=cbs, iterator=iterator, step_fn=self._train_one, steps=steps,
                           log_every=log_every, batch_logs=lambda _: self.compute_logs(), first_step=first_step,
                           steps_per_execution=self.steps_per_execution, after_step=after_step,
                           should_stop=should_stop)
        logs = dict(result.logs) if result.logs is not None else self.compute_logs()
        return logs, result.exhausted and not iterators.per_epoch

    def _local_stop(self) -> bool:
        """No user code runs during the epoch: ``stop_training`` is the same on every worker."""
        return bool(self.stop_training)

    def _agreed_stop(self) -> bool:
        """``stop_training`` as every worker sees it: true if any worker's callbacks set it."""
        collective = self.strategy.collective
        if collective.world_size > 1:
            self.stop_training = collective.agree_any(bool(self.stop_training))
        return bool(self.stop_training)

    def _train_one(self, batch: Any, global_batch_size: int) -> None:
        self.strategy.run(self.owner.train_step, (batch, global_batch_size))
        self.loss_tracker.count_step(global_batch_size)

    # --------------------------------------------------------- evaluate
    def evaluate(self, x: Any = None, y: Any = None, batch_size: Optional[int] = None, verbose: Any = "auto",
                 sample_weight: Any = None, steps: Optional[int] = None, callbacks: Any = None,
                 return_dict: bool = False) -> Any:
        """See `distrib.Model.evaluate`."""
        self.check_scope("evaluate")
        self.require_compiled("evaluate")
        _check_steps("evaluate", steps)
        with self.strategy.scope():
            handler = self._handler(x, y, sample_weight, batch_size, False, None, "evaluate")
            n_steps = steps if steps is not None else handler.steps_per_pass
            log_every = self.log_every or default_log_every(n_steps)
            cbs = self._callback_list(callbacks, verbose, fit=False, epochs=1, steps=n_steps, log_every=log_every)
            logs = self._evaluate_handler(handler, steps, cbs, log_every)
        if return_dict:
            return logs
        values = [logs[name] for name in self.metrics_names if name in logs]
        return values[0] if len(values) == 1 else values

    def _evaluate_handler(self, handler: DataHandler, steps: Optional[int], cbs: Any, log_every: int) -> Logs:
        """The test loop over ``handler``'s data (also fit's validation); returns the global logs."""
        was_training = self.module.training
        self.module.eval()
        self.reset_metrics()
        cbs.on_test_begin()
        try:
            result = run_steps(phase=TEST, callbacks=cbs, iterator=handler.make_iterator(), step_fn=self._test_one,
                               steps=steps, log_every=log_every, batch_logs=lambda _: self.compute_logs(),
                               steps_per_execution=self.steps_per_execution)
            logs = dict(result.logs) if result.logs is not None else self.compute_logs()
        finally:
            self.module.train(was_training)
        cbs.on_test_end(logs)
        return logs

    def _test_one(self, batch: Any, global_batch_size: int) -> None:
        self.strategy.run(self.owner.test_step, (batch, global_batch_size))
        self.loss_tracker.count_step(global_batch_size)

    # ---------------------------------------------------------- predict
    def predict(self, x: Any, batch_size: Optional[int] = None, verbose: Any = "auto", steps: Optional[int] = None,
                callbacks: Any = None) -> Any:
        """See `distrib.Model.predict` and `distrib.training.predict_output`."""
        self.check_scope("predict")
        _check_steps("predict", steps)
        with self.strategy.scope():
            handler = self._handler(x, None, None, batch_size, False, None, "predict")
            n_steps = steps if steps is not None else handler.steps_per_pass
            log_every = self.log_every or default_log_every(n_steps)
            cbs = self._callback_list(callbacks, verbose, fit=False, epochs=1, steps=n_steps, log_every=log_every)
            outputs: List[Any] = []
            sizes: List[int] = []

            def predict_one(batch: Any, _global_batch_size: int) -> Any:
                x_part, _, _ = step_fns.unpack(batch)
                parts = self.strategy._own_results(self.strategy.run(self.owner.predict_step, (x_part,)))
                y_pred = parts[0] if len(parts) == 1 else concat(list(parts))  # replicas of this process
                outputs.append(y_pred)
                sizes.append(rows_of(y_pred))
                return y_pred

            was_training = self.module.training
            self.module.eval()
            cbs.on_predict_begin()
            try:
                run_steps(phase=PREDICT, callbacks=cbs, iterator=handler.make_iterator(), step_fn=predict_one,
                          steps=steps, log_every=log_every, steps_per_execution=self.steps_per_execution,
                          batch_logs=lambda ys: {"outputs": ys[0] if len(ys) == 1 else concat(ys)})
            finally:
                self.module.train(was_training)
            result = assemble(self.strategy, outputs, sizes)
            cbs.on_predict_end()
        return result

    # ---------------------------------------------------------- helpers
    def _handler(self, x: Any, y: Any, sample_weight: Any, batch_size: Optional[int], shuffle: bool,
                 class_weight: Optional[Dict], purpose: str) -> DataHandler:
        return make_handler(self.strategy, self.module, x, y, sample_weight=sample_weight, batch_size=batch_size,
                            shuffle=shuffle, class_weight=class_weight, purpose=purpose)

    def _callback_list(self, callbacks: Any, verbose: Any, *, fit: bool, epochs: int, steps: Optional[int],
                       log_every: int) -> Any:
        cbs, history = make_callback_list(self.owner, callbacks, verbose=resolve_verbose(verbose, self.strategy),
                                          add_history=fit, epochs=epochs, steps=steps, log_every=log_every)
        if fit:
            self.history = history
        self.callbacks = cbs
        return cbs


def _check_steps(what: str, steps: Optional[int]) -> None:
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise ValueError(f"{what}(steps=...) must be a positive int or None, got {steps!r}")


def _distributed_world_size() -> int:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1
