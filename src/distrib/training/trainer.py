"""`Trainer`: a model's compiled state and the one loop behind fit, evaluate and predict.

`distrib.Model` is a `Trainer` (as Keras's ``Model`` is its ``Trainer``): the
trainer owns what ``compile`` resolves (optimizer, loss, metrics, the loss
tracker, ``steps_per_execution``), the strategy, the callbacks of the call in
progress, ``stop_training``, ``history`` and the `TrainLoopState` that
`BackupAndRestore` saves; ``train_step`` / ``test_step`` / ``predict_step``
are plain methods a subclass may override.

Every strategy trains through the same loop: `fit` runs its epochs with
`distrib.training.execution.fit_loop.run_fit`, `evaluate` (and fit's
validation) with `distrib.training.execution.eval_loop.run_evaluation`,
`predict` with `run_predict`, all over
`distrib.training.execution.step_loop.run_steps`. What a strategy changes is
how a step executes, through the step-executor contract
(`distrib.training.execution.step_executor`, chosen by `executor_for`):
replicated strategies run each step here; the parameter server's chief
schedules one function per ``steps_per_execution`` steps on its workers and
resolves their results when logs are needed.

Example (a subclass's step; the loop runs it under every strategy):
    >>> class Counting(distrib.Model):
    ...     def train_step(self, data, global_batch_size):
    ...         self.seen = getattr(self, "seen", 0) + 1
    ...         return super().train_step(data, global_batch_size)
    >>> model = Counting(torch.nn.Linear(1, 1))
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> _ = model.fit(np.ones((8, 1)), np.ones((8, 1)), batch_size=2, verbose=0)
    >>> model.seen
    4
"""
from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

import torch

from distrib.comm.elastic_abilities import elastic_abilities
from distrib.training.call_checks import (check_scope, check_steps, hint_if_alone_on_a_busy_machine,
                                          require_compiled, unreplicated_training)
from distrib.training.compile_config import CompiledLoss, CompiledMetrics, resolve_optimizer
from distrib.training.execution import steps as step_fns
from distrib.training.execution.callback_setup import make_callback_list, resolve_verbose
from distrib.training.execution.eval_loop import run_evaluation, run_predict
from distrib.training.execution.fit_data import validate_fit_args
from distrib.training.execution.fit_loop import run_fit
from distrib.training.execution.global_logs import global_logs
from distrib.training.execution.jit import JitForward, resolve_jit_compile
from distrib.training.execution.local_executor import LocalExecutor
from distrib.training.execution.loop_state import TrainLoopState
from distrib.training.execution.loss_tracker import LossTracker
from distrib.training.execution.predict_output import concat
from distrib.training.execution.scheduled_executor import ScheduledExecutor
from distrib.training.execution.step_executor import StepExecutor
from distrib.training.execution.step_loop import PREDICT, TEST, TRAIN, Phase
from distrib.training.execution.trainer_state import TrainerState
from distrib.training.saving import model_state
from distrib.training.saving.serialization import to_spec
from distrib.utils.pending_restore import PendingRestore

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["Trainer", "executor_for"]

Logs = Dict[str, Any]


class Trainer(TrainerState):
    """Compiled state plus fit / evaluate / predict over one step loop (the base of `distrib.Model`).

    Its attributes are declared once, by `TrainerState` (what the execution
    wing takes).

    Args:
        module: the network.
        strategy: the strategy every call runs under.
        name: used in error messages.
    """

    def __init__(self, module: torch.nn.Module, strategy: "Strategy", *, name: str) -> None:
        super().__init__(module, strategy, name)

    # ----------------------------------------------------------- compile
    @property
    def distribute_strategy(self) -> "Strategy":
        return self.strategy

    @property
    def steps_per_execution(self) -> int:
        """Steps between batch-level callback calls (``compile(steps_per_execution=...)``)."""
        return self._steps_per_execution

    @steps_per_execution.setter
    def steps_per_execution(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"steps_per_execution must be a positive int, got {value!r}")
        self._steps_per_execution = value

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
                steps_per_execution: int = 1, jit_compile: Any = "auto", run_eagerly: bool = False) -> None:
        """Configure the model for training (Keras's ``Model.compile``).

        Args:
            optimizer: a name (``"sgd"``, ``"adam"``, ``"rmsprop"``: Keras
                defaults), a `distrib.optimizers` object, or a torch optimizer.
            loss: a Keras loss name, a `distrib.losses` object, a torch loss
                module or a callable ``fn(y_true, y_pred)`` returning per-example
                losses; for several outputs a list/dict of those.
            metrics: a list of metric names or `distrib.metrics` objects (for
                several outputs, a dict or one list per output).
            loss_weights: scalar weights of each output's loss.
            steps_per_execution: steps run between two calls of the batch-level
                callbacks (``on_*_batch_begin`` gets the first step's index,
                ``on_*_batch_end`` the last's), as in Keras. The steps
                themselves and the trained weights do not change.
            jit_compile: True compiles each step's forward pass and loss with
                ``torch.compile`` (see `distrib.training.execution.jit`; where it cannot be one
                graph, one warning line and the step runs eagerly); ``"auto"``
                (the default) and False run eagerly, as Keras's torch backend does.
            run_eagerly: True runs eagerly whatever ``jit_compile`` says.
        """
        check_scope(self.strategy, "compile")
        jit = resolve_jit_compile(jit_compile) and not run_eagerly
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
        self.step_plan = None
        self.jit = JitForward(self.name, partial(step_fns.forward_and_loss, self)) if jit else None
        self._steps_per_execution = steps_per_execution  # checked above, with compile's own message
        self.compile_args = {"optimizer": optimizer, "loss": loss, "metrics": metrics, "loss_weights": loss_weights}
        if jit:
            self.compile_args["jit_compile"] = True
        self.metric_restore.apply(self.apply_metric_state)

    def get_compile_config(self) -> Optional[Dict[str, Any]]:
        """The compile arguments as JSON specs (see `distrib.training.saving.serialization`)."""
        if self.compile_args is None:
            return None
        return {k: v if k == "jit_compile" else to_spec(v, f"compile({k}=...)")
                for k, v in self.compile_args.items()}

    # ------------------------------------------------------------ steps
    def train_step(self, data: Any, global_batch_size: int) -> torch.Tensor:
        """One training step on this replica's part of a global batch; returns its loss share."""
        return step_fns.train_step(self, data, global_batch_size)

    def test_step(self, data: Any, global_batch_size: int) -> torch.Tensor:
        """One evaluation step on this replica's part of a global batch; returns its loss share."""
        return step_fns.test_step(self, data, global_batch_size)

    def predict_step(self, x: Any) -> Any:
        """Predictions for this replica's part of a global batch."""
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

    def step_function(self, phase: Phase) -> Callable[[Any, int], Any]:
        """``step(replica_batch, global_batch_size)`` of ``phase`` run by this process's replica(s)."""
        return {TRAIN: self._train_one, TEST: self._test_one, PREDICT: self._predict_one}[phase]

    def _train_one(self, batch: Any, global_batch_size: int) -> None:
        self.strategy.run(self.train_step, (batch, global_batch_size))
        self.loss_tracker.count_step(global_batch_size)

    def _test_one(self, batch: Any, global_batch_size: int) -> None:
        self.strategy.run(self.test_step, (batch, global_batch_size))
        self.loss_tracker.count_step(global_batch_size)

    def _predict_one(self, batch: Any, _global_batch_size: int) -> Any:
        x_part, _, _ = step_fns.unpack(batch)
        parts = self.strategy.own_results(self.strategy.run(self.predict_step, (x_part,)))
        return parts[0] if len(parts) == 1 else concat(list(parts))  # the replicas of this process

    def __getstate__(self) -> Dict[str, Any]:
        """What travels with a step scheduled on another task: the compiled state, not the call's.

        The callbacks, history, position and the optimizer wrapper stay here;
        the worker's copy starts with a fresh loss tracker (module, optimizer
        and metrics are shared by reference, see the parameter server's exporter).
        """
        state = dict(self.__dict__)
        state.update(callbacks=None, history=None, train_loop_state=TrainLoopState(), optimizer=None,
                     loss_scale_optimizer=None, metric_restore=PendingRestore(),
                     loss_tracker=LossTracker(self.strategy), step_plan=None, jit=None,
                     compile_args=None if self.compile_args is None else {**self.compile_args, "optimizer": None})
        return state

    # -------------------------------------------------------------- fit
    def fit(self, x: Any = None, y: Any = None, batch_size: Optional[int] = None, epochs: int = 1,
            verbose: Any = "auto", callbacks: Any = None, validation_data: Any = None,
            validation_steps: Optional[int] = None, validation_freq: Any = 1, initial_epoch: int = 0,
            steps_per_epoch: Optional[int] = None, shuffle: bool = True, class_weight: Optional[Dict] = None,
            sample_weight: Any = None, validation_split: float = 0.0,
            validation_batch_size: Optional[int] = None) -> Any:
        """Train for ``epochs`` epochs; returns the `History` (Keras's ``Model.fit``).

        ``x`` may be a batched `distrib.data.Dataset` (each element one
        *global* batch), a distributed dataset, a torch ``DataLoader`` or
        map-style ``Dataset``, or arrays/tensors with ``y`` (batched by
        ``batch_size`` as the global batch; without it, Keras 3's rule:
        ``ceil(rows / steps_per_epoch)`` when ``steps_per_epoch`` is given,
        else 32; likewise ``validation_steps``, and ``steps`` in `evaluate`
        and `predict`). Each global batch is
        split evenly among the replicas.

        With ``steps_per_epoch`` on arrays or a dataset of known size, an
        epoch ends where the pass over the data does (a warning when that cuts
        it short), the next starts a new pass and training goes on (Keras 3's
        rule); a dataset of unknown size that runs out first warns and stops
        training at the end of that epoch. Validation arrays are batched by ``validation_batch_size``
        (default: ``batch_size``).
        ``validation_split`` (arrays only) holds out the last fraction of the
        examples, before shuffling, as validation data when no
        ``validation_data`` is given.
        """
        hint_if_alone_on_a_busy_machine(self.strategy)
        check_scope(self.strategy, "fit")
        require_compiled(self.compiled, self.compiled_loss is not None, "fit")
        validate_fit_args(epochs, initial_epoch, steps_per_epoch, validation_freq, validation_split)
        self.step_plan = None
        executor = executor_for(self)
        with self.strategy.scope(), unreplicated_training(self.strategy, self.module):
            train, validation = executor.fit_inputs(
                x, y, batch_size=batch_size, shuffle=shuffle, class_weight=class_weight,
                sample_weight=sample_weight, steps_per_epoch=steps_per_epoch, validation_data=validation_data,
                validation_split=validation_split, validation_steps=validation_steps,
                validation_batch_size=validation_batch_size)
            elastic = elastic_abilities(self.strategy.collective)
            if elastic is not None:
                elastic.add_resize_listener(self._fold_metrics)  # leavers' metric sums stay in the job
            try:
                return run_fit(self, executor, train, validation, epochs=epochs, initial_epoch=initial_epoch,
                               validation_freq=validation_freq, callbacks=callbacks, verbose=verbose)
            finally:
                if elastic is not None:
                    elastic.remove_resize_listener(self._fold_metrics)

    def _fold_metrics(self, leaving: List[bool]) -> None:
        model_state.fold_metrics(self)

    def local_stop(self) -> bool:
        """No user code runs during the epoch: ``stop_training`` is the same on every worker."""
        return bool(self.stop_training)

    def agreed_stop(self) -> bool:
        """``stop_training`` as every worker sees it: true if any worker's callbacks set it."""
        collective = self.strategy.collective
        if collective.distributed:
            self.stop_training = collective.agree_any(bool(self.stop_training))
        return bool(self.stop_training)

    # --------------------------------------------------------- evaluate
    def evaluate(self, x: Any = None, y: Any = None, batch_size: Optional[int] = None, verbose: Any = "auto",
                 sample_weight: Any = None, steps: Optional[int] = None, callbacks: Any = None,
                 return_dict: bool = False) -> Any:
        """Loss and metrics over the data, identical on every worker (Keras's ``Model.evaluate``)."""
        check_scope(self.strategy, "evaluate")
        require_compiled(self.compiled, self.compiled_loss is not None, "evaluate")
        check_steps("evaluate", steps)
        self.step_plan = None
        executor = executor_for(self)
        with self.strategy.scope():
            data = executor.eval_input(x, y, batch_size=batch_size, sample_weight=sample_weight, steps=steps)
            log_every = self.log_every or data.log_every
            cbs = self.make_callbacks(callbacks, verbose, fit=False, epochs=1, steps=data.steps, log_every=log_every)
            logs = run_evaluation(self, executor, data, cbs, log_every)
        if return_dict:
            return logs
        values = [logs[name] for name in self.metrics_names if name in logs]
        return values[0] if len(values) == 1 else values

    # ---------------------------------------------------------- predict
    def predict(self, x: Any, batch_size: Optional[int] = None, verbose: Any = "auto", steps: Optional[int] = None,
                callbacks: Any = None) -> Any:
        """All predictions, in input order, as numpy arrays on every worker
        (`distrib.training.execution.predict_output`; the steps run in this process)."""
        check_scope(self.strategy, "predict")
        check_steps("predict", steps)
        self.step_plan = None
        executor = LocalExecutor(self)
        with self.strategy.scope():
            data = executor.predict_input(x, batch_size=batch_size, steps=steps)
            log_every = self.log_every or data.log_every
            cbs = self.make_callbacks(callbacks, verbose, fit=False, epochs=1, steps=data.steps, log_every=log_every)
            return run_predict(self, executor, data, cbs, log_every)

    # ---------------------------------------------------------- helpers
    def make_callbacks(self, callbacks: Any, verbose: Any, *, fit: bool, epochs: int, steps: Optional[int],
                       log_every: int) -> Any:
        """The `CallbackList` of one call (History added for fit); kept as ``self.callbacks``."""
        cbs, history = make_callback_list(self, callbacks, verbose=resolve_verbose(verbose, self.strategy),
                                          add_history=fit, epochs=epochs, steps=steps, log_every=log_every)
        if fit:
            self.history = history
        self.callbacks = cbs
        return cbs


def executor_for(trainer: Trainer) -> StepExecutor:
    """How ``trainer``'s steps execute: scheduled where its strategy has a step scheduler, else here."""
    scheduler = trainer.strategy.step_scheduler()
    return LocalExecutor(trainer) if scheduler is None else ScheduledExecutor(trainer, scheduler)
