"""`DatasetCreator`: TF's ``tf.keras.utils.experimental.DatasetCreator`` — input given as a function.

Under `distrib.experimental.ParameterServerStrategy`, ``Model.fit`` builds
one input pipeline on every worker by calling the function there with an
`distrib.data.InputContext` (``num_input_pipelines`` = workers,
``input_pipeline_id`` = that worker's index), so each worker can shard,
shuffle and batch its own data. A plain callable taking the context works
the same; the wrapper exists so ported TF code runs unchanged.

Example:
    >>> def dataset_fn(input_context):
    ...     ds = distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(64).batch(32).repeat()
    ...     return ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    >>> model.fit(distrib.data.experimental.DatasetCreator(dataset_fn), epochs=5, steps_per_epoch=20)
"""
from __future__ import annotations

from typing import Any, Callable, Optional

__all__ = ["DatasetCreator"]


class DatasetCreator:
    """A function ``dataset_fn(input_context) -> Dataset`` that `Model.fit` calls on each worker.

    Args:
        dataset_fn: called with an `distrib.data.InputContext`; returns a
            batched dataset (each element one step's batch on that worker),
            normally ``.repeat()``-ed: ``fit`` under a parameter-server
            strategy needs ``steps_per_epoch`` and keeps one iterator per
            worker across epochs.
        input_options: accepted for TF compatibility; nothing to configure.

    Raises:
        TypeError: ``dataset_fn`` is not callable.
    """

    def __init__(self, dataset_fn: Callable[[Any], Any], input_options: Optional[Any] = None) -> None:
        if not callable(dataset_fn):
            raise TypeError(f"DatasetCreator(dataset_fn) needs a function input_context -> dataset, "
                            f"got {type(dataset_fn).__name__}")
        self.dataset_fn = dataset_fn
        self.input_options = input_options

    def __call__(self, input_context: Any) -> Any:
        return self.dataset_fn(input_context)

    def __repr__(self) -> str:
        return f"DatasetCreator({getattr(self.dataset_fn, '__name__', self.dataset_fn)!r})"
