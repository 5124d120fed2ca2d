"""Keras-named optimizers backed by ``torch.optim`` (``distrib.optimizers``).

Each is a specification created before the model's parameters exist
(``compile(optimizer=distrib.optimizers.SGD(learning_rate=0.001))``) that
`Optimizer.build` turns into the torch optimizer, with Keras's default
hyper-parameters. See each module for how Keras's update maps onto torch's.

Example:
    >>> opt = distrib.optimizers.get("adam")                # Keras defaults: lr 1e-3, eps 1e-7
    >>> torch_opt = opt.build(module.parameters())
    >>> opt.learning_rate = 1e-4                            # reaches torch_opt.param_groups
"""
from distrib.optimizers.adagrad import Adagrad
from distrib.optimizers.adam import Adam, AdamW
from distrib.optimizers.base import Optimizer
from distrib.optimizers.learning_rate import get_learning_rate, set_learning_rate
from distrib.optimizers.registry import deserialize, get, serialize
from distrib.optimizers.rmsprop import RMSprop
from distrib.optimizers.sgd import SGD
from distrib.optimizers import schedules

__all__ = [
    "Optimizer",
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "get",
    "serialize",
    "deserialize",
    "get_learning_rate",
    "set_learning_rate",
    "schedules",
]
