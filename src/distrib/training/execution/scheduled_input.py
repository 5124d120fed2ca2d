"""The input of `fit`/`evaluate` when steps are scheduled on workers (the parameter server's chief).

As Keras does under TF's parameter-server strategy:

* the input is a function (``dataset_fn(input_context)``, a
  `distrib.data.experimental.DatasetCreator`) or a dataset made on the chief;
  each worker builds its own pipeline from it once per ``fit`` (a function
  gets that worker's `InputContext`; a dataset is copied whole to each
  worker) and keeps one iterator across epochs;
* the number of steps is required (``steps_per_epoch``, ``validation_steps``,
  ``evaluate(steps=...)``): the workers' data normally repeats;
* batching and weighting belong in the dataset: ``batch_size``,
  ``class_weight``, ``sample_weight`` and ``validation_split`` are refused.

Lazy modules and metrics are built on the chief from one batch of pipeline 0
before anything is scheduled (Keras builds from the first batch too).

Example:
    >>> required_steps(None, "steps_per_epoch", "fit")
    Traceback (most recent call last):
    ValueError: fit under ParameterServerStrategy needs steps_per_epoch=N: ...
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

import torch

from distrib.data.dataset import Dataset
from distrib.data.dataset_creator import DatasetCreator
from distrib.data.distribution.input_context import InputContext
from distrib.strategies.step_scheduler import StepScheduler
from distrib.training.execution import steps as step_fns
from distrib.training.execution.trainer_state import TrainerState
from distrib.training.execution.step_loop import default_log_every

__all__ = ["OUT_OF_DATA_WARNING", "required_steps", "dataset_recipe", "refuse_array_options", "ScheduledEpochs",
           "ScheduledEval", "build_on_chief"]

OUT_OF_DATA_WARNING = ("A worker's input ran out of data during epoch {epoch} ({done} of {wanted} steps ran); "
                       "interrupting training. Under ParameterServerStrategy each worker's dataset should "
                       "repeat: add .repeat() in dataset_fn.")


def required_steps(value: Any, name: str, what: str) -> int:
    """``value`` if it is a positive int; a one-line error naming ``what(name=...)`` otherwise."""
    if value is None:
        raise ValueError(f"{what} under ParameterServerStrategy needs {name}=N: the workers' datasets repeat, "
                         f"so the epoch length must be given, e.g. model.{what}(dataset_fn, {name}=20)")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what}({name}=...) must be a positive int, got {value!r}")
    return value


def refuse_array_options(what: str, **options: Any) -> None:
    """One-line error for the first option (``batch_size``, ``class_weight``, ...) that was given."""
    for name, value in options.items():
        if value is not None and value is not False and value != 0.0:
            raise ValueError(f"{what}({name}=...) is not supported under ParameterServerStrategy: batch, "
                             f"weight and split the data in dataset_fn (batches of (x, y, sample_weight))")


class _CopyOf:
    """A dataset made on the chief: every worker iterates its own copy (not sharded)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __call__(self, input_context: Any) -> Any:
        return self.dataset


def dataset_recipe(x: Any, y: Any, what: str) -> Callable[[InputContext], Any]:
    """The per-worker recipe for ``x``: a function of the worker's `InputContext`.

    Example:
        >>> dataset_recipe(DatasetCreator(fn), None, "fit") is fn
        True
    """
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


def per_worker_iterator(loop: TrainerState, scheduler: StepScheduler, dataset_fn: Callable) -> Iterator[Any]:
    """One iterator on every worker over ``dataset_fn``'s pipeline for that worker."""
    strategy = loop.strategy

    def per_worker() -> Any:
        return strategy.distribute_datasets_from_function(dataset_fn)

    return iter(scheduler.create_per_worker_dataset(per_worker))


def build_on_chief(loop: TrainerState, dataset_fn: Callable) -> None:
    """Materialise lazy modules and the compiled metrics from one batch run on the chief.

    The chief draws one batch from ``dataset_fn`` (input pipeline 0 of one)
    and calls the module on it without gradients inside the scope; the newly
    initialised parameters go to the ps tasks before anything is scheduled.
    """
    lazy = any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in loop.module.parameters())
    metrics = loop.compiled_metrics
    if not lazy and (metrics is None or metrics.built):
        return
    dataset = dataset_fn(InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1))
    try:
        batch = next(iter(dataset))
    except StopIteration:
        raise ValueError("fit under ParameterServerStrategy: dataset_fn returned an empty dataset") from None
    with loop.strategy.scope(), torch.no_grad():
        y_pred = step_fns.call_module(loop, step_fns.unpack(batch)[0])  # type: ignore[arg-type]
        if metrics is not None and not metrics.built:
            metrics.build(y_pred)
            loop.metric_restore.apply(loop.apply_metric_state)


class ScheduledEpochs:
    """`EpochInput`: one per-worker iterator that runs across epochs."""

    needs_seed = False

    def __init__(self, iterator: Iterator[Any], steps: int) -> None:
        self.iterator = iterator
        self.steps: Optional[int] = steps

    def set_seed(self, seed: int) -> None:
        """Nothing to seed: each worker's pipeline shuffles as its dataset_fn says."""

    def for_epoch(self, first_step: int, restored: bool) -> Iterator[Any]:
        return self.iterator

    def out_of_data(self, *, epoch: int, epoch_steps: int, needed: int, seen: int) -> Optional[str]:
        return OUT_OF_DATA_WARNING.format(epoch=epoch, done=epoch_steps, wanted=self.steps)


class ScheduledEval:
    """`EvalInput`: one per-worker iterator that every evaluation continues."""

    def __init__(self, iterator: Iterator[Any], steps: int) -> None:
        self._iterator = iterator
        self.steps: Optional[int] = steps
        self.log_every = default_log_every(steps)

    def iterator(self) -> Iterator[Any]:
        return self._iterator
