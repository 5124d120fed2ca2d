"""The Keras-style training API: `Model` (compile / fit / evaluate / predict / save).

Who owns what (the package's wings; each module's docstring says the rest):

* **The model and its compiled state**: `model` (the user's `Model`),
  `model_persistence` (its state, weights, summary, save, export),
  `compile_config` (what `compile` resolves), `loop` (`TrainingLoop`: the
  compiled state and the one loop), `loop_host` (what the loop's parts use of it).
* **Execution** — one step loop for every strategy: `step_loop` (the loop),
  `fit_loop` / `fit_data` / `eval_loop` (fit's epochs, evaluate, predict),
  `steps` (the per-replica train/test/predict steps), `step_plan` (what a step
  would otherwise look up), `jit` (`jit_compile`), `step_executor` (the
  contract) with `local_executor` (this process) and `scheduled_executor` /
  `scheduled_input` (the parameter server's workers), `data_adapter` (input to
  batches), `loss_tracker` / `global_logs` / `predict_output` (what steps
  produce), `stop_agreement` and `callback_setup` (the user's code in a run),
  `loop_state` (where fit is, for a backup).
* **Saving and loading**: `saving` / `loading` (`Model.save`, `load_model`),
  `weights` (`save_weights`), `model_state`, `architecture`, `serialization`
  and `registry` (JSON descriptions and the names a file may use),
  `keras_io` (Keras 3 models).
* **The side-car evaluator**: `sidecar`, `sidecar_state`.
* `errors`: the package's error classes, below every module that raises them.

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
