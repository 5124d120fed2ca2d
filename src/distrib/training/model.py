"""`distrib.Model`: Keras's compile/fit/evaluate/predict around any `torch.nn.Module`.

Create the model inside the scope of the strategy that trains it; it keeps
that strategy (``model.distribute_strategy``) and every later call runs
under it. The training step is plain PyTorch — forward, loss,
``loss.backward()``, ``optimizer.step()`` — and the strategy makes it
distributed: parameters are identical on every replica and gradients are
summed across replicas before each optimizer step.

Example (the guide's one-layer model; numpy inputs, batch 10 split among replicas):
    >>> strategy = distrib.MultiWorkerMirroredStrategy()
    >>> with strategy.scope():
    ...     model = distrib.Model(torch.nn.Linear(1, 1))
    >>> model.compile(loss="mse", optimizer="sgd")
    >>> history = model.fit(np.ones((100, 1)), np.ones((100, 1)), epochs=2, batch_size=10)
    >>> sorted(history.history)
    ['loss']

Saving: ``model.save(path)`` writes weights, optimizer state, the compile
configuration and how to rebuild the module (see `distrib.training.saving`);
`distrib.models.load_model(path)` returns a compiled model that continues
training exactly like this one.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

import numpy as np
import torch

from distrib.strategies import context
from distrib.training.compile_config import CompiledLoss, CompiledMetrics, resolve_optimizer
from distrib.training.global_logs import global_logs
from distrib.training.loop_state import TrainLoopState
from distrib.training.loss_tracker import LossTracker
from distrib.training.serialization import import_by_path, to_spec
from distrib.training import model_state, steps

__all__ = ["Model"]


class Model:
    """A Keras-style model wrapping a ``torch.nn.Module``.

    Args:
        module: the network; ``module(x)`` gives the predictions. A tuple
            ``x`` is passed as positional arguments, a dict as keyword arguments.
            If it has a ``losses`` attribute (a list of scalar tensors, or a
            method returning one) those regularisation losses are added to the
            training loss.
        builder: optional import path ``"pkg.module:function"`` of a function
            that returns a fresh ``module`` (called with ``builder_kwargs``);
            `distrib.models.load_model` uses it to rebuild the architecture.
            Without it, a module whose class is importable and constructible
            with no arguments is rebuilt from its class.
        builder_kwargs: JSON-serialisable keyword arguments for ``builder``.
        name: the model's name (default: the module's class name).
    """

    def __init__(self, module: torch.nn.Module, *, builder: Optional[str] = None,
                 builder_kwargs: Optional[Dict[str, Any]] = None, name: Optional[str] = None) -> None:
        if isinstance(module, Model):
            raise TypeError("distrib.Model(module) got a distrib.Model; pass the torch.nn.Module it wraps "
                            "(model.module)")
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"distrib.Model(module) needs a torch.nn.Module, got {type(module).__name__}")
        if builder is not None and (not isinstance(builder, str) or ":" not in builder):
            raise ValueError(f"distrib.Model(builder=...) must be an import path like 'pkg.module:function', "
                             f"got {builder!r}")
        if builder_kwargs is not None:
            to_spec(builder_kwargs, "builder_kwargs")  # fails early if not JSON-describable
        self._strategy = context.get_strategy()
        self.module = module
        self._strategy.track_module(module)
        self.builder = builder
        self.builder_kwargs = dict(builder_kwargs or {})
        self.name = name or type(module).__name__
        self.stop_training = False
        self.history: Any = None
        self.train_loop_state = TrainLoopState()
        #: Steps between log/progress updates in fit/evaluate/predict; None: about 16 per epoch.
        self.log_every: Optional[int] = None
        self._compile_args: Optional[Dict[str, Any]] = None
        self.optimizer: Any = None
        self._torch_optimizer: Optional[torch.optim.Optimizer] = None
        #: fit's loss scaling under the mixed_float16 policy (made on first use).
        self._loss_scale_optimizer: Any = None
        self._compiled_loss: Optional[CompiledLoss] = None
        self._compiled_metrics: Optional[CompiledMetrics] = None
        self._loss_tracker = LossTracker(self._strategy)
        self._pending_metric_state: Optional[Dict[str, Any]] = None

    # ------------------------------------------------------------ identity
    @property
    def distribute_strategy(self) -> Any:
        """The strategy whose scope the model was created in."""
        return self._strategy

    @property
    def compiled(self) -> bool:
        return self._compile_args is not None

    @property
    def torch_optimizer(self) -> Optional[torch.optim.Optimizer]:
        """The ``torch.optim.Optimizer`` that steps the parameters (built by `compile`)."""
        return self._torch_optimizer

    @property
    def loss(self) -> Any:
        """The ``loss`` given to `compile`."""
        return None if self._compile_args is None else self._compile_args["loss"]

    @property
    def metrics(self) -> List[Any]:
        """The loss tracker followed by the compiled metric objects (Keras's ``model.metrics``)."""
        entries = self._compiled_metrics.entries if self._compiled_metrics is not None else []
        return [self._loss_tracker] + [m for _, _, m in entries]

    @property
    def metrics_names(self) -> List[str]:
        """``["loss", <metric log names>...]``: the order of `evaluate`'s list result."""
        entries = self._compiled_metrics.entries if self._compiled_metrics is not None else []
        return ["loss"] + [name for _, name, _ in entries]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def parameters(self, recurse: bool = True) -> Any:
        return self.module.parameters(recurse)

    @property
    def trainable_weights(self) -> List[torch.nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]

    def __repr__(self) -> str:
        return f"distrib.Model({self.name}, strategy={type(self._strategy).__name__}, compiled={self.compiled})"

    # ---------------------------------------------------------------- scope
    def _check_scope(self, what: str) -> None:
        current = context.current_scope_strategy()
        if current is not None and current is not self._strategy:
            raise RuntimeError(
                f"model.{what}() called under {type(current).__name__}.scope() but the model was created "
                f"under {type(self._strategy).__name__}: create (and compile) the model inside the scope of "
                "the strategy that runs it")
        if self._strategy.num_replicas_in_sync == 1 and _distributed_world_size() > 1:
            raise RuntimeError(
                f"model.{what}(): this process is one of {_distributed_world_size()} workers but the model was "
                "created outside any strategy scope, so it would train alone; create it inside "
                "`with strategy.scope():`")

    def _require_compiled(self, what: str) -> None:
        if self._compile_args is None:
            raise RuntimeError(f"model.{what}() needs a compiled model: call model.compile(optimizer=..., "
                               f"loss=...) first")
        if self._compiled_loss is None and what in ("fit", "evaluate"):
            raise RuntimeError(f"model.{what}() needs a loss: call model.compile(loss=...) with a loss")

    # -------------------------------------------------------------- compile
    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Any = None,
                loss_weights: Any = None) -> None:
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
        """
        self._check_scope("compile")
        with self._strategy.scope():
            self._compiled_loss = None if loss is None else CompiledLoss(loss, loss_weights)
            if self._compiled_loss is None and metrics:
                raise ValueError("compile(metrics=...) without a loss: give compile(loss=...) too")
            placeholder = self._compiled_loss or CompiledLoss("mse", None)
            self._compiled_metrics = CompiledMetrics(metrics, placeholder)
            params = [p for p in self.module.parameters() if p.requires_grad]
            self.optimizer, self._torch_optimizer = resolve_optimizer(optimizer, params)
        self._loss_tracker = LossTracker(self._strategy)
        self._compile_args = {"optimizer": optimizer, "loss": loss, "metrics": metrics,
                              "loss_weights": loss_weights}
        if self._pending_metric_state is not None:
            self._apply_metric_state(self._pending_metric_state)

    def get_compile_config(self) -> Optional[Dict[str, Any]]:
        """The compile arguments as JSON specs (see `distrib.training.serialization`)."""
        if self._compile_args is None:
            return None
        return {k: to_spec(v, f"compile({k}=...)") for k, v in self._compile_args.items()}

    # --------------------------------------------------------------- steps
    def train_step(self, data: Any, global_batch_size: int) -> torch.Tensor:
        """One training step on this replica's part of a global batch; returns its loss share."""
        return steps.train_step(self, data, global_batch_size)

    def test_step(self, data: Any, global_batch_size: int) -> torch.Tensor:
        """One evaluation step on this replica's part of a global batch; returns its loss share."""
        return steps.test_step(self, data, global_batch_size)

    def predict_step(self, x: Any) -> Any:
        """Predictions for this replica's part of a global batch."""
        return steps.predict_step(self, x)

    def reset_metrics(self) -> None:
        """Reset the loss tracker and every compiled metric."""
        self._loss_tracker.reset_state()
        if self._compiled_metrics is not None:
            self._compiled_metrics.reset_state()

    def compute_logs(self) -> Dict[str, float]:
        """``{"loss": ..., <metric>: ...}`` over all replicas (collective: call on every worker)."""
        entries = self._compiled_metrics.entries if self._compiled_metrics is not None else []
        return global_logs(self._strategy, self._loss_tracker, [(name, m) for _, name, m in entries])

    # ------------------------------------------------------- fit and co.
    def fit(self, x: Any = None, y: Any = None, batch_size: Optional[int] = None, epochs: int = 1,
            verbose: Union[str, int] = "auto", callbacks: Any = None, validation_data: Any = None,
            validation_steps: Optional[int] = None, validation_freq: Any = 1, initial_epoch: int = 0,
            steps_per_epoch: Optional[int] = None, shuffle: bool = True, class_weight: Optional[Dict] = None,
            sample_weight: Any = None) -> Any:
        """Train for ``epochs`` epochs; returns the `History` (Keras's ``Model.fit``).

        ``x`` may be a batched `distrib.data.Dataset` (each element one
        *global* batch), a distributed dataset, a torch ``DataLoader`` or
        map-style ``Dataset``, or arrays/tensors with ``y`` (batched by
        ``batch_size``, default 32, as the global batch). Each global batch is
        split evenly among the replicas.

        With ``steps_per_epoch`` on a dataset that runs out first, training
        warns and stops at the end of that epoch (Keras's behaviour).
        """
        from distrib.training import ps_fit
        from distrib.training.train_loop import run_fit

        return (ps_fit.run_ps_fit if ps_fit.uses_parameter_servers(self) else run_fit)(self, x=x, y=y, batch_size=batch_size, epochs=epochs, verbose=verbose,
                       callbacks=callbacks, validation_data=validation_data,
                       validation_steps=validation_steps, validation_freq=validation_freq,
                       initial_epoch=initial_epoch, steps_per_epoch=steps_per_epoch, shuffle=shuffle,
                       class_weight=class_weight, sample_weight=sample_weight)

    def evaluate(self, x: Any = None, y: Any = None, batch_size: Optional[int] = None,
                 verbose: Union[str, int] = "auto", sample_weight: Any = None, steps: Optional[int] = None,
                 callbacks: Any = None, return_dict: bool = False) -> Any:
        """Loss and metrics over the data, identical on every worker (Keras's ``Model.evaluate``)."""
        from distrib.training import ps_fit
        from distrib.training.eval_loop import run_evaluate

        return (ps_fit.run_ps_evaluate if ps_fit.uses_parameter_servers(self) else run_evaluate)(self, x=x, y=y, batch_size=batch_size, verbose=verbose,
                            sample_weight=sample_weight, steps=steps, callbacks=callbacks,
                            return_dict=return_dict)

    def predict(self, x: Any, batch_size: Optional[int] = None, verbose: Union[str, int] = "auto",
                steps: Optional[int] = None, callbacks: Any = None) -> Any:
        """All predictions, in input order, as numpy arrays on every worker."""
        from distrib.training.predict_loop import run_predict

        return run_predict(self, x=x, batch_size=batch_size, verbose=verbose, steps=steps,
                           callbacks=callbacks)

    # --------------------------------------------------------------- state
    def state_dict(self, aggregate_metrics: bool = False) -> Dict[str, Any]:
        """Module, optimizer and metric states (tensors and plain values only).

        Metric states are this replica's own. With ``aggregate_metrics=True``
        they are summed over all replicas (a collective: every worker must
        call it), so that restoring the copy on every worker reproduces the
        same global metric values (see `distrib.training.model_state`).
        """
        return model_state.model_state_dict(self, aggregate_metrics)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore what `state_dict` returned (compile first to restore the optimizer)."""
        model_state.load_model_state(self, state)

    def _apply_metric_state(self, pending: Dict[str, Any]) -> None:
        model_state.apply_metric_state(self, pending)

    def get_weights(self) -> List[np.ndarray]:
        """The module's parameters and buffers as numpy arrays, in ``state_dict`` order."""
        return model_state.get_weights(self.module)

    def set_weights(self, weights: List[Any]) -> None:
        """Set parameters and buffers from `get_weights`'s list (same order and shapes)."""
        model_state.set_weights(self.module, weights)

    def count_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())

    def summary(self, print_fn: Any = print) -> None:
        """Print the module and its parameter counts (chief only under multi-worker strategies)."""
        if not self._strategy.is_chief:
            return
        trainable = sum(p.numel() for p in self.module.parameters() if p.requires_grad)
        print_fn(f'Model: "{self.name}"\n{self.module}\n'
                 f"Total params: {self.count_params():,}\nTrainable params: {trainable:,}\n"
                 f"Non-trainable params: {self.count_params() - trainable:,}")

    # --------------------------------------------------------------- saving
    def save(self, filepath: str, overwrite: bool = True) -> None:
        """Save to directory ``filepath`` (every worker calls it; only the chief's copy lands there)."""
        from distrib.training.saving import save_model

        save_model(self, filepath, overwrite=overwrite)

    def builder_callable(self) -> Any:
        """The function `load_model` would call to rebuild the module."""
        return import_by_path(self.builder, "builder") if self.builder else None


def _distributed_world_size() -> int:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1
