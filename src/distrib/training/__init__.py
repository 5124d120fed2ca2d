"""The Keras-style training API: `Model` (compile / fit / evaluate / predict / save).

Example:
    >>> with strategy.scope():
    ...     model = distrib.Model(build_cnn())
    ...     model.compile(loss="sparse_categorical_crossentropy", optimizer="sgd", metrics=["accuracy"])
    >>> model.fit(dataset, epochs=3, steps_per_epoch=70)
"""
from distrib.training.loop import TrainingLoop
from distrib.training.loop_state import TrainLoopState
from distrib.training.model import Model

__all__ = ["Model", "TrainLoopState", "TrainingLoop"]
