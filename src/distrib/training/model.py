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

`Model` is the trainer (as Keras's ``Model`` is its ``Trainer``): its
compiled state, fit, evaluate, predict and the overridable ``train_step`` /
``test_step`` / ``predict_step`` come from `distrib.training.trainer.Trainer`,
which runs them the same way under every strategy (the strategy supplies only
how a step executes); its state, weights, summary and saving methods come
from `distrib.training.saving.model_persistence.ModelPersistence`.

Saving: ``model.save(path)`` writes weights, optimizer state, the compile
configuration and how to rebuild the module (see `distrib.training.saving.model_save`);
`distrib.models.load_model(path)` returns a compiled model that continues
training exactly like this one.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from distrib.strategies import default
from distrib.training.direct_call import call_module
from distrib.training.saving.model_persistence import ModelPersistence
from distrib.training.saving.serialization import to_spec
from distrib.training.trainer import Trainer

__all__ = ["Model"]


class Model(Trainer, ModelPersistence):
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
        super().__init__(module, strategy, name=name or type(module).__name__)

    @property
    def loop(self) -> "Model":
        """The model itself: it is its own trainer (programs that read ``model.loop`` keep working)."""
        return self

    def __call__(self, *args: Any, training: Optional[bool] = None, **kwargs: Any) -> Any:
        """``module(*args, **kwargs)``; ``training=True/False`` and numpy inputs as
        `distrib.training.direct_call` says (Keras's ``model(x, training=True)``)."""
        return call_module(self.module, args, kwargs, training)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def parameters(self, recurse: bool = True) -> Any:
        return self.module.parameters(recurse)

    @property
    def trainable_weights(self) -> List[torch.nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]

    @property
    def trainable_variables(self) -> List[torch.nn.Parameter]:
        """Keras's other name for `trainable_weights` (``apply_gradients(zip(grads, model.trainable_variables))``)."""
        return self.trainable_weights

    def __repr__(self) -> str:
        return (f"distrib.Model({self.name}, strategy={type(self.distribute_strategy).__name__}, "
                f"compiled={self.compiled})")
