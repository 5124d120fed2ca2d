"""`Model.fit` and `Model.evaluate` under `ParameterServerStrategy`: a coordinator-driven loop.

On the chief (the coordinator), as Keras does under TF's parameter-server
strategy:

* the input is a function (``dataset_fn(input_context)``, a
  `distrib.data.experimental.DatasetCreator`) or a dataset made on the chief;
  each worker builds its own pipeline from it once per ``fit`` (a function
  gets that worker's `InputContext`; a dataset is copied whole to each
  worker) and keeps one iterator across epochs;
* ``steps_per_epoch`` is required (the workers' data normally repeats);
* each epoch schedules ``ceil(steps_per_epoch / steps_per_execution)``
  closures with `ClusterCoordinator.schedule`; a closure runs up to
  ``model.steps_per_execution`` training steps on its worker (re-reading the
  variables from the ps tasks between steps) and returns its summed loss;
  metric states change on the worker and their changes are added to the
  chief's metrics when the closure finishes (sums of totals and counts);
* at the epoch end the chief joins, computes the logs and calls the
  callbacks (History, progress, BackupAndRestore, ...): those that read the
  model's ``state_dict`` see the variables read back from the ps tasks, and
  restoring one writes them to the ps tasks.

Buffers (BatchNorm statistics) travel with each closure: it starts from the
chief's buffers and its final buffers are copied back into the chief's module
when it has finished, in scheduling order.

A worker lost mid-epoch costs nothing but time: its closure runs again on
another worker (a closure may therefore run twice; only the finished run is
counted). Evaluation is inline: closures of ``test_step`` on the workers,
metrics merged on the chief.

Example (chief + 2 workers + 2 ps; the same script on every task):
    >>> strategy = distrib.experimental.ParameterServerStrategy()
    >>> with strategy.scope():
    ...     model = distrib.Model(torch.nn.Linear(4, 1))
    ...     model.compile(optimizer="sgd", loss="mse", steps_per_execution=5)   # 5 steps per closure
    >>> history = model.fit(dataset_fn, epochs=3, steps_per_epoch=20)
    >>> len(history.history["loss"])
    3
"""
from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import torch

from distrib.training import steps as step_fns
from distrib.training.callback_setup import make_callback_list, resolve_verbose
from distrib.training.loss_tracker import LossTracker
from distrib.utils.pending_restore import PendingRestore

if TYPE_CHECKING:  # pragma: no cover
    from distrib.training.model import Model

__all__ = ["uses_parameter_servers", "run_ps_fit", "run_ps_evaluate", "PS_OUT_OF_DATA_WARNING"]

PS_OUT_OF_DATA_WARNING = ("A worker's input ran out of data during epoch {epoch} ({done} of {wanted} steps ran); "
                          "interrupting training. Under ParameterServerStrategy each worker's dataset should "
                          "repeat: add .repeat() in dataset_fn.")


def uses_parameter_servers(model: "Model") -> bool:
    """Whether ``model`` was created under a `ParameterServerStrategy` on its chief (fit goes here)."""
    from distrib.strategies.parameter_server import ParameterServerStrategy

    strategy = model.distribute_strategy
    return isinstance(strategy, ParameterServerStrategy) and strategy._runtime is not None


# ------------------------------------------------------------------ worker side
class _StepModel:
    """What `distrib.training.steps` needs of a model, small enough to travel with every closure.

    The module, optimizer and metrics travel by reference (the worker keeps
    one copy of each); the loss and the metric container by value.
    """

    def __init__(self, model: "Model") -> None:
        loop = model.loop
        self.module = loop.module
        self.name = loop.name
        self.loss = loop.loss
        self.strategy = loop.strategy
        self.torch_optimizer = loop.torch_optimizer
        self.compiled_loss = loop.compiled_loss
        self.compiled_metrics = loop.compiled_metrics
        self.loss_tracker = LossTracker(loop.strategy)
        self.metric_restore: PendingRestore[Dict[str, Any]] = PendingRestore()
        self.loss_scale_optimizer = None
        #: The chief's buffers (BatchNorm statistics, ...) when the closure is scheduled.
        self.buffers: Dict[str, torch.Tensor] = {}

    def snapshot_buffers(self) -> None:
        self.buffers = {name: b.detach().clone() for name, b in self.module.named_buffers()}


def _batch_size(batch: Any) -> int:
    from distrib.utils.nest import flatten

    x = step_fns.unpack(batch)[0]
    for t in flatten(x):
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            return int(t.shape[0])
    raise ValueError("fit under ParameterServerStrategy: a batch has no tensor with a batch dimension")


def _run_chunk(shim: _StepModel, iterator: Any, steps: int, training: bool) -> Dict[str, Any]:
    """Runs on a worker: up to ``steps`` steps; returns the summed loss, examples and steps done."""
    from distrib.strategies.parameter_server.worker import refresh_variables

    shim.loss_tracker.reset_state()
    shim.module.train(training)
    _load_buffers(shim.module, shim.buffers)
    params = list(shim.module.parameters())
    step = step_fns.train_step if training else step_fns.test_step
    count = done = 0
    for index in range(steps):
        try:
            batch = next(iterator)
        except StopIteration:
            break
        if training and index > 0:
            refresh_variables(params)
        size = _batch_size(batch)
        shim.strategy.run(step, args=(shim, batch, size))
        count += size
        done += 1
    buffers = {name: b.detach().clone() for name, b in shim.module.named_buffers()} if training else {}
    return {"total": shim.loss_tracker.local_total().detach().cpu(), "count": count, "steps": done,
            "buffers": buffers}


def _load_buffers(module: torch.nn.Module, values: Dict[str, torch.Tensor]) -> None:
    """Copy ``values`` into ``module``'s buffers of the same names (shapes and dtypes are the module's)."""
    if not values:
        return
    with torch.no_grad():
        for name, buffer in module.named_buffers():
            value = values.get(name)
            if value is not None and value.shape == buffer.shape:
                buffer.copy_(value.to(buffer.dtype))


# ------------------------------------------------------------------- chief side
def _dataset_fn(x: Any, y: Any, what: str) -> Any:
    """The per-worker recipe: a function of the `InputContext`."""
    from distrib.data.dataset import Dataset
    from distrib.data.dataset_creator import DatasetCreator

    if y is not None:
        raise ValueError(f"{what} under ParameterServerStrategy takes a dataset function, a DatasetCreator "
                         f"or a dataset, not arrays (x, y): wrap them, e.g. DatasetCreator(lambda ctx: "
                         f"distrib.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat())")
    if isinstance(x, DatasetCreator):
        return x.dataset_fn
    if isinstance(x, Dataset):
        return _CopyOf(x)
    if callable(x):
        return x
    raise TypeError(f"{what} under ParameterServerStrategy takes a dataset function "
                    f"(input_context -> Dataset), a distrib.data.experimental.DatasetCreator or a "
                    f"distrib.data.Dataset; got {type(x).__name__}")


class _CopyOf:
    """A dataset made on the chief: every worker iterates its own copy (not sharded)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __call__(self, input_context: Any) -> Any:
        return self.dataset


def _per_worker_iterator(model: "Model", dataset_fn: Any) -> Any:
    from distrib.strategies.parameter_server.coordinator import ClusterCoordinator

    strategy = model.distribute_strategy
    coordinator = ClusterCoordinator(strategy)

    def per_worker() -> Any:
        return strategy.distribute_datasets_from_function(dataset_fn)

    return coordinator, iter(coordinator.create_per_worker_dataset(per_worker))


def _build_on_chief(model: "Model", dataset_fn: Any) -> None:
    """Materialise lazy modules and the compiled metrics from one batch run on the chief.

    Keras builds layers and metrics from the first batch; here the chief
    draws one batch from ``dataset_fn`` (input pipeline 0 of one), calls the
    module on it without gradients inside the scope, and places the newly
    initialised parameters on the ps tasks before anything is scheduled.
    """
    from distrib.data.input_context import InputContext

    lazy = any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in model.module.parameters())
    metrics = model.loop.compiled_metrics
    if not lazy and (metrics is None or metrics.built):
        return
    strategy = model.distribute_strategy
    dataset = dataset_fn(InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1))
    try:
        batch = next(iter(dataset))
    except StopIteration:
        raise ValueError("fit under ParameterServerStrategy: dataset_fn returned an empty dataset") from None
    with strategy.scope(), torch.no_grad():
        x = step_fns.unpack(batch)[0]
        y_pred = step_fns.call_module(model.loop, x)
        if metrics is not None and not metrics.built:
            metrics.build(y_pred)
            model.loop.metric_restore.apply(model.loop.apply_metric_state)
    strategy._place_pending()


def _ship_model(model: "Model") -> None:
    """Create the module, optimizer and metrics on the cluster now (before callbacks restore a backup),
    so that the optimizer's state_dict/load_state_dict reach its state on the ps tasks."""
    model.distribute_strategy._place_pending()
    model.distribute_strategy._exporter.export_value(_StepModel(model))


def _check_steps(value: Any, name: str, what: str) -> int:
    if value is None:
        raise ValueError(f"{what} under ParameterServerStrategy needs {name}=N: the workers' datasets repeat, "
                         f"so the epoch length must be given, e.g. model.{what}(dataset_fn, {name}=20)")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what}({name}=...) must be a positive int, got {value!r}")
    return value


def _steps_per_execution(model: "Model") -> int:
    value = getattr(model, "steps_per_execution", 1) or 1
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"model.steps_per_execution must be a positive int, got {value!r}")
    return value


def _run_closures(model: "Model", coordinator: Any, iterator: Any, steps: int, training: bool,
                  cbs: Any, first_global_step: Optional[int]) -> Tuple[int, List[Any]]:
    """Schedule ``steps`` steps in closures, join, add their losses to the chief's tracker."""
    shim = _StepModel(model)
    per = _steps_per_execution(model)
    state = model.train_loop_state
    remotes: List[Any] = []
    applied = 0
    step = 0
    while step < steps:
        n = min(per, steps - step)
        (cbs.on_train_batch_begin if training else cbs.on_test_batch_begin)(step)
        applied = _take_buffers(model, remotes, applied)
        shim.snapshot_buffers()
        remotes.append(coordinator.schedule(_run_chunk, args=(shim, iterator, n, training)))
        step += n
        if training:
            state.step_in_epoch = step
            state.global_step = (first_global_step or 0) + step
        (cbs.on_train_batch_end if training else cbs.on_test_batch_end)(step - 1, None)
    coordinator.join()
    _take_buffers(model, remotes, applied)
    done = 0
    for remote in remotes:
        result = remote.get()
        model.loop.loss_tracker.update(result["total"], 1)
        model.loop.loss_tracker.count_step(result["count"])
        done += result["steps"]
    return done, remotes


def _take_buffers(model: "Model", remotes: List[Any], applied: int) -> int:
    """Copy the buffers of the finished closures ``remotes[applied:]`` (in order) into the chief's module.

    Buffers (BatchNorm statistics) are not variables on the ps tasks: each
    closure starts from the chief's buffers when it was scheduled and its
    final values are copied here once it finished, in scheduling order (so a
    later closure's values win, like unsynchronised assignments under TF's
    parameter-server training).
    """
    while applied < len(remotes) and remotes[applied].done():
        try:
            buffers = remotes[applied].get()["buffers"]
        except Exception:  # noqa: BLE001 - the error surfaces from join()
            buffers = {}
        _load_buffers(model.module, buffers)
        applied += 1
    return applied


def run_ps_fit(model: "Model", *, x: Any, y: Any, epochs: int, verbose: Any, callbacks: Any,
               validation_data: Any, validation_steps: Optional[int], validation_freq: Any,
               initial_epoch: int, steps_per_epoch: Optional[int], batch_size: Optional[int] = None,
               class_weight: Optional[Dict] = None, sample_weight: Any = None, **unused: Any) -> Any:
    """`Model.fit` under `ParameterServerStrategy` (see the module docstring)."""
    from distrib.training.fit_data import should_validate as _should_validate
    from distrib.training.fit_data import validate_fit_args as _validate_fit_args

    for name, value in (("batch_size", batch_size), ("class_weight", class_weight),
                        ("sample_weight", sample_weight)):
        if value is not None:
            raise ValueError(f"fit({name}=...) is not supported under ParameterServerStrategy: batch, weight "
                             f"and sample-weight the data in dataset_fn (batches of (x, y, sample_weight))")
    model._require_compiled("fit")
    steps = _check_steps(steps_per_epoch, "steps_per_epoch", "fit")
    _validate_fit_args(epochs, initial_epoch, steps, validation_freq)
    strategy = model.distribute_strategy
    dataset_fn = _dataset_fn(x, y, "fit")
    val_fn = None
    if validation_data is not None:
        val_fn = _dataset_fn(validation_data, None, "fit(validation_data=...)")
        _check_steps(validation_steps, "validation_steps", "fit")
    with strategy.scope():
        _build_on_chief(model, dataset_fn)
        coordinator, iterator = _per_worker_iterator(model, dataset_fn)
        val_iterator = _per_worker_iterator(model, val_fn)[1] if val_fn is not None else None
        _ship_model(model)
        state = model.train_loop_state
        per = _steps_per_execution(model)
        cbs, model.history = make_callback_list(model, callbacks, verbose=resolve_verbose(verbose, strategy),
                                                add_history=True, epochs=epochs, steps=steps, log_every=per)
        model.loop.callbacks = cbs
        model.stop_training = False
        state.epoch, state.step_in_epoch, state.epoch_done = initial_epoch, 0, False
        cbs.on_train_begin()
        restored = state.consume_restored()
        start_epoch, start_step = state.resume_point() if restored else (initial_epoch, 0)
        logs: Optional[Dict[str, Any]] = None
        for epoch in range(start_epoch, epochs):
            first_step = start_step if epoch == start_epoch else 0
            if not (restored and epoch == start_epoch and first_step > 0):
                model.reset_metrics()
            state.epoch, state.step_in_epoch, state.epoch_done = epoch, first_step, False
            cbs.on_epoch_begin(epoch)
            base = state.global_step - first_step
            done, _ = _run_closures(model, coordinator, iterator, steps - first_step, True, cbs, base + first_step)
            state.step_in_epoch, state.global_step = first_step + done, base + first_step + done
            logs = model.compute_logs()
            if val_iterator is not None and _should_validate(epoch, validation_freq):
                val_logs = _evaluate(model, coordinator, val_iterator, validation_steps, cbs)  # type: ignore[arg-type]
                logs.update({f"val_{k}": v for k, v in val_logs.items()})
            state.epoch_done = True
            cbs.on_epoch_end(epoch, logs)
            if done < steps - first_step:
                warnings.warn(PS_OUT_OF_DATA_WARNING.format(epoch=epoch, done=first_step + done, wanted=steps),
                              stacklevel=3)
                model.stop_training = True
            if model.stop_training:
                break
        cbs.on_train_end(logs)
    return model.history


def _evaluate(model: "Model", coordinator: Any, iterator: Any, steps: int, cbs: Any) -> Dict[str, Any]:
    model.reset_metrics()
    cbs.on_test_begin()
    _run_closures(model, coordinator, iterator, steps, False, cbs, None)
    logs = model.compute_logs()
    cbs.on_test_end(logs)
    return logs


def run_ps_evaluate(model: "Model", *, x: Any, y: Any, verbose: Any, steps: Optional[int], callbacks: Any,
                    return_dict: bool, batch_size: Optional[int] = None, sample_weight: Any = None,
                    **unused: Any) -> Any:
    """`Model.evaluate` under `ParameterServerStrategy`: test steps on the workers, metrics merged here."""
    for name, value in (("batch_size", batch_size), ("sample_weight", sample_weight)):
        if value is not None:
            raise ValueError(f"evaluate({name}=...) is not supported under ParameterServerStrategy: batch and "
                             f"weight the data in dataset_fn (batches of (x, y, sample_weight))")
    model._require_compiled("evaluate")
    n = _check_steps(steps, "steps", "evaluate")
    strategy = model.distribute_strategy
    dataset_fn = _dataset_fn(x, y, "evaluate")
    with strategy.scope():
        _build_on_chief(model, dataset_fn)
        coordinator, iterator = _per_worker_iterator(model, dataset_fn)
        cbs, _ = make_callback_list(model, callbacks, verbose=resolve_verbose(verbose, strategy), add_history=False,
                                    epochs=1, steps=n, log_every=max(1, math.ceil(n / 16)))
        logs = _evaluate(model, coordinator, iterator, n, cbs)
    if return_dict:
        return logs
    values = [logs[name] for name in model.metrics_names if name in logs]
    return values[0] if len(values) == 1 else values
