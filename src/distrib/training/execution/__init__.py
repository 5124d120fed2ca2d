"""The execution wing: one step loop for every strategy, and how its steps execute.

Who owns what:

* `trainer_state`: a trainer's state, declared once (`Trainer` is one): what this wing
  (and `saving.model_state`) takes.
* `step_loop`: the loop of steps (``run_steps``), its phases and executions.
* `fit_loop` / `fit_data` / `eval_loop`: fit's epochs and their arguments, evaluate, predict.
* `steps`: the per-replica train/test/predict steps (plain PyTorch); `step_plan`: what a
  step would otherwise look up each time; `jit`: ``compile(jit_compile=True)``.
* `step_executor`: the contract (inputs, ``execute``, ``resolve``), below both
  executors: `local_executor` (steps run in this process) and `scheduled_executor`
  with `scheduled_input` (the parameter server's workers run them).
* `data_adapter`: what fit/evaluate/predict receive, as batches.
* `loss_tracker` / `global_logs` / `predict_output`: what steps produce.
* `stop_agreement` / `callback_setup`: the user's code in a run; `loop_state`: where
  fit is, for a backup.
"""
