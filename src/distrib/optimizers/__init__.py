"""Keras-named optimizers that compute Keras 3's updates on torch parameters (``distrib.optimizers``).

Each is a specification created before the model's parameters exist
(``compile(optimizer=distrib.optimizers.SGD(learning_rate=0.001))``) that
`Optimizer.build` turns into a torch optimizer (`KerasTorchOptimizer`) whose
``step`` computes what Keras 3 computes, Keras's defaults included. A
``torch.optim`` optimizer passed by the user keeps torch's own rules.

Example:
    >>> opt = distrib.optimizers.get("adam")                # Keras defaults: lr 1e-3, eps 1e-7
    >>> torch_opt = opt.build(module.parameters())
    >>> opt.learning_rate = 1e-4                            # reaches torch_opt.param_groups
"""
from distrib.optimizers.adadelta_ftrl import Adadelta, Ftrl, KerasAdadelta, KerasFtrl
from distrib.optimizers.adam import Adam, AdamW, KerasAdam
from distrib.optimizers.adam_variants import Adamax, KerasAdamax, KerasLion, KerasNadam, Lion, Nadam
from distrib.optimizers.base import Optimizer
from distrib.optimizers.keras_torch import KerasTorchOptimizer
from distrib.optimizers.learning_rate import get_learning_rate, set_learning_rate
from distrib.optimizers.registry import deserialize, get, serialize
from distrib.optimizers.rmsprop import Adagrad, KerasAdagrad, KerasRMSprop, RMSprop
from distrib.optimizers.sgd import SGD, KerasSGD
from distrib.optimizers import legacy, schedules  # legacy: Keras 2's names, refused in one line

__all__ = [
    "Optimizer",
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "Nadam",
    "Adamax",
    "Lion",
    "Adadelta",
    "Ftrl",
    "get",
    "serialize",
    "deserialize",
    "get_learning_rate",
    "set_learning_rate",
    "schedules",
    "KerasTorchOptimizer",
    "KerasSGD",
    "KerasAdam",
    "KerasRMSprop",
    "KerasAdagrad",
    "KerasNadam",
    "KerasAdamax",
    "KerasLion",
    "KerasAdadelta",
    "KerasFtrl",
]
