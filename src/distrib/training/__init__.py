"""The Keras-style training API: `Model` (compile / fit / evaluate / predict / save).

Who owns what (the package's wings; each module's docstring says the rest):

* **The model**: `model` (`Model`: the user's object) is a `trainer.Trainer`
  (the compiled state, fit / evaluate / predict and the overridable steps)
  and a `saving.model_persistence.ModelPersistence`; `compile_config` (what
  `compile` resolves), `call_checks` (what a call checks before it runs),
  `model_load` (`distrib.models.load_model`: builds a `Model`, so above it), `errors`.
* **execution/**: one step loop for every strategy and the step-executor
  contract with its two executors (this process; the parameter server's workers).
* **saving/**: state dicts, weights, ``Model.save``, the JSON
  descriptions and the names a file may use, Keras 3 models.
* **sidecar/**: the side-car evaluator and its state.

Example:
    >>> with strategy.scope():
    ...     model = distrib.Model(build_cnn())
    ...     model.compile(loss="sparse_categorical_crossentropy", optimizer="sgd", metrics=["accuracy"])
    >>> model.fit(dataset, epochs=3, steps_per_epoch=70)
"""
from distrib.training.execution.loop_state import TrainLoopState
from distrib.training.model import Model
from distrib.training.trainer import Trainer

__all__ = ["Model", "TrainLoopState", "Trainer"]
