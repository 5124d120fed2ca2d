"""`TrainingLoop`: a model's compiled state and the one loop behind fit, evaluate and predict.

A `distrib.Model` is a thin facade over one `TrainingLoop` (``model.loop``).
The loop owns what ``compile`` resolves (optimizer, loss, metrics, the loss
tracker, ``steps_per_execution``), the strategy, the callbacks of the call
in progress, ``stop_training``, ``history`` and the `TrainLoopState` that
`BackupAndRestore` saves.

Every strategy trains through the same loop: `fit` runs its epochs with
`distrib.training.fit_loop.run_fit`, `evaluate` (and fit's validation)
with `distrib.training.eval_loop.run_evaluation`, `predict` with
`run_predict`, all over `distrib.training.step_loop.run_steps`. What a
strategy changes is how a step executes, through the step-executor contract
(`distrib.training.step_executor`, chosen by its `executor_for`): replicated
strategies run each step here (``train_step`` / ``test_step`` /
``predict_step``, looked up on the owner so a `Model` subclass may override
them); the parameter server's chief schedules one function per
``steps_per_execution`` steps on its workers and resolves their results
when logs are needed.

Example (the loop without the facade; callbacks then see the loop as ``self.model``):
    >>> loop = TrainingLoop(torch.nn.Linear(1, 1), distrib.get_strategy(), name="linear")
    >>> loop.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    >>> sorted(loop.fit(np.ones((8, 1)), np.ones((8, 1)), batch_size=2, epochs=1, verbose=0).history)
    ['loss']
"""
from __future__ import annotations

import contextlib
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

import torch

from distrib.comm.optimizer_hook import unreplicated_steps
from distrib.strategies import context
from distrib.strategies.local_replicas import replica_process
from distrib.training import model_state, steps as step_fns
from distrib.training.callback_setup import make_callback_list, resolve_verbose
from distrib.training.compile_config import CompiledLoss, CompiledMetrics, resolve_optimizer
from distrib.training.eval_loop import run_evaluation, run_predict
from distrib.training.fit_data import validate_fit_args
from distrib.training.fit_loop import run_fit
from distrib.training.global_logs import global_logs
from distrib.training.jit import JitForward, resolve_jit_compile
from distrib.training.local_executor import LocalExecutor
from distrib.training.loop_state import TrainLoopState
from distrib.training.loss_tracker import LossTracker
from distrib.training.predict_output import concat
from distrib.training.serialization import to_spec
from distrib.training.step_executor import executor_for
from distrib.training.step_loop import PREDICT, TEST, TRAIN, Phase
from distrib.training.step_plan import StepPlan
from distrib.utils.pending_restore import PendingRestore

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

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

    def __init__(self, module: torch.nn.Module, strategy: "Strategy", *, name: str, owner: Any = None) -> None:
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
        #: What this call's steps look up once (`distrib.training.step_plan`); None: resolve at the next step.
        self.step_plan: Optional[StepPlan] = None
        #: The compiled forward pass and loss (``compile(jit_compile=True)``), or None: eager.
        self.jit: Optional[JitForward] = None

    # ----------------------------------------------------------- compile
    @property
    def distribute_strategy(self) -> "Strategy":
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
                steps_per_execution: int = 1, jit_compile: Any = "auto", run_eagerly: bool = False) -> None:
        """See `distrib.Model.compile`."""
        self.check_scope("compile")
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
        self.steps_per_execution = steps_per_execution
        self.compile_args = {"optimizer": optimizer, "loss": loss, "metrics": metrics, "loss_weights": loss_weights}
        if jit:
            self.compile_args["jit_compile"] = True
        self.metric_restore.apply(self.apply_metric_state)

    def get_compile_config(self) -> Optional[Dict[str, Any]]:
        """The compile arguments as JSON specs (see `distrib.training.serialization`)."""
        if self.compile_args is None:
            return None
        return {k: v if k == "jit_compile" else to_spec(v, f"compile({k}=...)")
                for k, v in self.compile_args.items()}

    def check_scope(self, what: str) -> None:
        """Raise if ``model.<what>()`` runs under another strategy's scope, or alone in a multi-worker job."""
        current = context.current_scope_strategy()
        if current is not None and current is not self.strategy:
            raise RuntimeError(
                f"model.{what}() called under {type(current).__name__}.scope() but the model was created "
                f"under {type(self.strategy).__name__}: create (and compile) the model inside the scope of "
                "the strategy that runs it")
        # Only training alone is refused: evaluating/predicting an unreplicated model is TF's behaviour too.
        # In a local-replica process an unreplicated model trains as in TF's one process (replica_process);
        # one made in a OneDeviceStrategy's scope trains alone in each worker on purpose, as in TF.
        if (what == "fit" and context.is_default_strategy(self.strategy) and _distributed_world_size() > 1
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

    def step_function(self, phase: Phase) -> Callable[[Any, int], Any]:
        """``step(replica_batch, global_batch_size)`` of ``phase`` run by this process's replica(s)."""
        return {TRAIN: self._train_one, TEST: self._test_one, PREDICT: self._predict_one}[phase]

    def _train_one(self, batch: Any, global_batch_size: int) -> None:
        self.strategy.run(self.owner.train_step, (batch, global_batch_size))
        self.loss_tracker.count_step(global_batch_size)

    def _test_one(self, batch: Any, global_batch_size: int) -> None:
        self.strategy.run(self.owner.test_step, (batch, global_batch_size))
        self.loss_tracker.count_step(global_batch_size)

    def _predict_one(self, batch: Any, _global_batch_size: int) -> Any:
        x_part, _, _ = step_fns.unpack(batch)
        parts = self.strategy.own_results(self.strategy.run(self.owner.predict_step, (x_part,)))
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
            sample_weight: Any = None, validation_split: float = 0.0) -> Any:
        """See `distrib.Model.fit`; returns the `History`."""
        self.check_scope("fit")
        self.require_compiled("fit")
        validate_fit_args(epochs, initial_epoch, steps_per_epoch, validation_freq, validation_split)
        self.step_plan = None
        executor = executor_for(self)
        with self.strategy.scope(), self._unreplicated_training():
            train, validation = executor.fit_inputs(
                x, y, batch_size=batch_size, shuffle=shuffle, class_weight=class_weight,
                sample_weight=sample_weight, steps_per_epoch=steps_per_epoch, validation_data=validation_data,
                validation_split=validation_split, validation_steps=validation_steps)
            collective = self.strategy.collective
            collective.add_resize_listener(self._fold_metrics)  # elastic: leavers' metric sums stay in the job
            try:
                return run_fit(self, executor, train, validation, epochs=epochs, initial_epoch=initial_epoch,
                               validation_freq=validation_freq, callbacks=callbacks, verbose=verbose)
            finally:
                collective.remove_resize_listener(self._fold_metrics)

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
        """See `distrib.Model.evaluate`."""
        self.check_scope("evaluate")
        self.require_compiled("evaluate")
        _check_steps("evaluate", steps)
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
        """See `distrib.Model.predict` and `distrib.training.predict_output` (runs in this process)."""
        self.check_scope("predict")
        _check_steps("predict", steps)
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
