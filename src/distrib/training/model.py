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

`Model` is a facade: its compiled state (optimizer, loss, metrics,
``stop_training``, ``history``, ``train_loop_state``) lives in a
`distrib.training.loop.TrainingLoop` (``model.loop``), which runs fit,
evaluate and predict the same way under every strategy (the strategy
supplies only how a step executes); the methods here delegate to it. Its
state, weights, summary and saving methods come from
`distrib.training.model_persistence.ModelPersistence`.

Saving: ``model.save(path)`` writes weights, optimizer state, the compile
configuration and how to rebuild the module (see `distrib.training.saving`);
`distrib.models.load_model(path)` returns a compiled model that continues
training exactly like this one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

import torch

from distrib.strategies import default
from distrib.training.loop import TrainingLoop
from distrib.training.loop_state import TrainLoopState
from distrib.training.model_persistence import ModelPersistence
from distrib.training.serialization import to_spec

if TYPE_CHECKING:
    from distrib.strategies.interface import Strategy

__all__ = ["Model"]


class Model(ModelPersistence):
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
        strategy = default.get_strategy()
        strategy.track_module(module)
        self.builder = builder
        self.builder_kwargs = dict(builder_kwargs or {})
        self._loop = TrainingLoop(module, strategy, name=name or type(module).__name__, owner=self)

    # ------------------------------------------------------------ identity
    @property
    def loop(self) -> TrainingLoop:
        """The `TrainingLoop` that holds the compiled state and runs fit / evaluate / predict."""
        return self._loop

    @property
    def module(self) -> torch.nn.Module:
        """The wrapped ``torch.nn.Module``."""
        return self._loop.module

    @module.setter
    def module(self, module: torch.nn.Module) -> None:
        self._loop.module = module

    @property
    def name(self) -> str:
        return self._loop.name

    @name.setter
    def name(self, name: str) -> None:
        self._loop.name = name

    @property
    def distribute_strategy(self) -> "Strategy":
        """The strategy whose scope the model was created in."""
        return self._loop.strategy

    @property
    def compiled(self) -> bool:
        return self._loop.compiled

    @property
    def optimizer(self) -> Any:
        """The optimizer given to (or built by) `compile`."""
        return self._loop.optimizer

    @optimizer.setter
    def optimizer(self, optimizer: Any) -> None:
        self._loop.optimizer = optimizer

    @property
    def torch_optimizer(self) -> Optional[torch.optim.Optimizer]:
        """The ``torch.optim.Optimizer`` that steps the parameters (built by `compile`)."""
        return self._loop.torch_optimizer

    @property
    def _loss_scale_optimizer(self) -> Any:
        return self._loop.loss_scale_optimizer

    @property
    def loss(self) -> Any:
        """The ``loss`` given to `compile`."""
        return self._loop.loss

    @property
    def metrics(self) -> List[Any]:
        """The loss tracker followed by the compiled metric objects (Keras's ``model.metrics``)."""
        return self._loop.metrics

    @property
    def metrics_names(self) -> List[str]:
        """``["loss", <metric log names>...]``: the order of `evaluate`'s list result."""
        return self._loop.metrics_names

    @property
    def steps_per_execution(self) -> int:
        """Steps between batch-level callback calls (``compile(steps_per_execution=...)``)."""
        return self._loop.steps_per_execution

    @steps_per_execution.setter
    def steps_per_execution(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"steps_per_execution must be a positive int, got {value!r}")
        self._loop.steps_per_execution = value

    @property
    def stop_training(self) -> bool:
        """Set by a callback to end `fit` after the current step (execution) and epoch's end hooks."""
        return self._loop.stop_training

    @stop_training.setter
    def stop_training(self, value: bool) -> None:
        self._loop.stop_training = value

    @property
    def history(self) -> Any:
        """The `History` of the last `fit`."""
        return self._loop.history

    @history.setter
    def history(self, history: Any) -> None:
        self._loop.history = history

    @property
    def train_loop_state(self) -> TrainLoopState:
        """Where `fit` is (epoch, step, data position): what `BackupAndRestore` saves and restores."""
        return self._loop.train_loop_state

    @property
    def log_every(self) -> Optional[int]:
        """Steps between log/progress updates in fit/evaluate/predict; None: about 16 per epoch."""
        return self._loop.log_every

    @log_every.setter
    def log_every(self, value: Optional[int]) -> None:
        self._loop.log_every = value

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
        return (f"distrib.Model({self.name}, strategy={type(self.distribute_strategy).__name__}, "
                f"compiled={self.compiled})")

    # -------------------------------------------------------------- compile
    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Any = None,
                loss_weights: Any = None, steps_per_execution: int = 1, jit_compile: Any = "auto",
                run_eagerly: bool = False) -> None:
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
                ``torch.compile`` (see `distrib.training.jit`; where it cannot be one
                graph, one warning line and the step runs eagerly); ``"auto"``
                (the default) and False run eagerly, as Keras's torch backend does.
            run_eagerly: True runs eagerly whatever ``jit_compile`` says.
        """
        self._loop.compile(optimizer=optimizer, loss=loss, metrics=metrics, loss_weights=loss_weights,
                           steps_per_execution=steps_per_execution, jit_compile=jit_compile,
                           run_eagerly=run_eagerly)

    def get_compile_config(self) -> Optional[Dict[str, Any]]:
        """The compile arguments as JSON specs (see `distrib.training.serialization`)."""
        return self._loop.get_compile_config()

    # --------------------------------------------------------------- steps
    def train_step(self, data: Any, global_batch_size: int) -> torch.Tensor:
        """One training step on this replica's part of a global batch; returns its loss share."""
        return self._loop.train_step(data, global_batch_size)

    def test_step(self, data: Any, global_batch_size: int) -> torch.Tensor:
        """One evaluation step on this replica's part of a global batch; returns its loss share."""
        return self._loop.test_step(data, global_batch_size)

    def predict_step(self, x: Any) -> Any:
        """Predictions for this replica's part of a global batch."""
        return self._loop.predict_step(x)

    def reset_metrics(self) -> None:
        """Reset the loss tracker and every compiled metric."""
        self._loop.reset_metrics()

    def compute_logs(self) -> Dict[str, float]:
        """``{"loss": ..., <metric>: ...}`` over all replicas (collective: call on every worker)."""
        return self._loop.compute_logs()

    # ------------------------------------------------------- fit and co.
    def fit(self, x: Any = None, y: Any = None, batch_size: Optional[int] = None, epochs: int = 1,
            verbose: Union[str, int] = "auto", callbacks: Any = None, validation_data: Any = None,
            validation_steps: Optional[int] = None, validation_freq: Any = 1, initial_epoch: int = 0,
            steps_per_epoch: Optional[int] = None, shuffle: bool = True, class_weight: Optional[Dict] = None,
            sample_weight: Any = None, validation_split: float = 0.0) -> Any:
        """Train for ``epochs`` epochs; returns the `History` (Keras's ``Model.fit``).

        ``x`` may be a batched `distrib.data.Dataset` (each element one
        *global* batch), a distributed dataset, a torch ``DataLoader`` or
        map-style ``Dataset``, or arrays/tensors with ``y`` (batched by
        ``batch_size``, default 32, as the global batch). Each global batch is
        split evenly among the replicas.

        With ``steps_per_epoch`` on a dataset that runs out first, training
        warns and stops at the end of that epoch (Keras's behaviour).
        ``validation_split`` (arrays only) holds out the last fraction of the
        examples, before shuffling, as validation data when no
        ``validation_data`` is given.
        """
        _hint_if_alone_on_a_busy_machine(self._loop.strategy)
        return self._loop.fit(x=x, y=y, batch_size=batch_size, epochs=epochs, verbose=verbose,
                              callbacks=callbacks, validation_data=validation_data,
                              validation_steps=validation_steps, validation_freq=validation_freq,
                              initial_epoch=initial_epoch, steps_per_epoch=steps_per_epoch, shuffle=shuffle,
                              class_weight=class_weight, sample_weight=sample_weight,
                              validation_split=validation_split)

    def evaluate(self, x: Any = None, y: Any = None, batch_size: Optional[int] = None,
                 verbose: Union[str, int] = "auto", sample_weight: Any = None, steps: Optional[int] = None,
                 callbacks: Any = None, return_dict: bool = False) -> Any:
        """Loss and metrics over the data, identical on every worker (Keras's ``Model.evaluate``)."""
        return self._loop.evaluate(x=x, y=y, batch_size=batch_size, verbose=verbose,
                                   sample_weight=sample_weight, steps=steps, callbacks=callbacks,
                                   return_dict=return_dict)

    def predict(self, x: Any, batch_size: Optional[int] = None, verbose: Union[str, int] = "auto",
                steps: Optional[int] = None, callbacks: Any = None) -> Any:
        """All predictions, in input order, as numpy arrays on every worker."""
        return self._loop.predict(x=x, batch_size=batch_size, verbose=verbose, steps=steps,
                                  callbacks=callbacks)


def _hint_if_alone_on_a_busy_machine(strategy: "Strategy") -> None:
    """`distrib.config.threading.warn_if_oversubscribed` for a lone process (not a replica, not a worker)."""
    from distrib.config.threading import warn_if_oversubscribed
    from distrib.strategies.local_replicas import replica_process

    dist = torch.distributed
    if (strategy.num_replicas_in_sync == 1 and replica_process.current() is None
            and not (dist.is_available() and dist.is_initialized())):
        warn_if_oversubscribed()

