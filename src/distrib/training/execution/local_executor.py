"""`LocalExecutor`: steps run in this process, now (every replicated strategy).

The input is turned into per-replica batches by
`distrib.training.execution.data_adapter` (arrays, datasets, loaders; each global
batch split among the replicas), epoch iterators follow
`distrib.training.execution.fit_data.EpochIterators`, and each step is the loop's
step function run by this process's replica(s) (`strategy.run`). Nothing
runs elsewhere, so `resolve` has nothing to wait for.

Example:
    >>> executor = LocalExecutor(loop)
    >>> train, _ = executor.fit_inputs(x, y, batch_size=10, shuffle=True, class_weight=None, sample_weight=None,
    ...                                steps_per_epoch=None, validation_data=None, validation_split=0.0,
    ...                                validation_steps=None)
    >>> executor.execute(TRAIN, train.for_epoch(0, False), 3, on_begin=lambda: None).steps
    3
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from distrib.training.execution.data_adapter import DataHandler, make_handler
from distrib.training.execution.fit_data import (OUT_OF_DATA_WARNING, PASS_ENDED_WARNING, EpochIterators, split_arrays,
                                                 split_validation)
from distrib.training.execution.trainer_state import TrainerState
from distrib.training.execution.step_executor import StepExecutor
from distrib.training.execution.step_loop import Execution, Phase, default_log_every

__all__ = ["LocalExecutor"]


class _LocalEpochs:
    """`EpochInput` over a `DataHandler` (see `EpochIterators` for which iterator each epoch gets)."""

    def __init__(self, handler: DataHandler, steps_per_epoch: Optional[int], state: Any) -> None:
        self.handler = handler
        self.iterators = EpochIterators(handler, steps_per_epoch, state)
        self.steps = self.iterators.steps
        self.needs_seed = handler.needs_seed

    def set_seed(self, seed: int) -> None:
        self.handler.seed = seed

    def for_epoch(self, first_step: int, restored: bool) -> Iterator[Any]:
        return self.iterators.for_epoch(first_step, restored)

    def out_of_data(self, *, epoch: int, epoch_steps: int, needed: int, seen: int) -> Optional[str]:
        if self.iterators.per_epoch:
            return None  # an epoch of a per-epoch iterator ends with its data
        if self.iterators.pass_ends_epoch:  # the epoch ends with the pass, training goes on (Keras 3)
            size = self.handler.batch_size
            warnings.warn(PASS_ENDED_WARNING.format(batches=self.handler.steps_per_pass, steps=self.steps,
                                                    of="" if size is None else f" of {size}"), stacklevel=4)
            return None
        return OUT_OF_DATA_WARNING.format(needed=needed, seen=seen)


class _LocalEval:
    """`EvalInput` over a `DataHandler`: a fresh pass for every evaluation."""

    def __init__(self, handler: DataHandler, steps: Optional[int]) -> None:
        self.handler = handler
        self.steps = steps if steps is not None else handler.steps_per_pass  # known: the bar shows 32/32
        self.log_every = default_log_every(self.steps)

    def iterator(self) -> Iterator[Any]:
        return self.handler.make_iterator()


class LocalExecutor(StepExecutor):
    """Runs each step in this process (see the module docstring).

    Args:
        loop: the loop whose steps run.
    """

    eager_batch_logs = True

    def __init__(self, loop: TrainerState) -> None:
        self.loop = loop

    def _handler(self, x: Any, y: Any, sample_weight: Any, batch_size: Optional[int], shuffle: bool,
                 class_weight: Optional[Dict], purpose: str, steps: Optional[int]) -> DataHandler:
        return make_handler(self.loop.strategy, self.loop.module, x, y, sample_weight=sample_weight,
                            batch_size=batch_size, shuffle=shuffle, class_weight=class_weight, purpose=purpose,
                            steps=steps)

    def fit_inputs(self, x: Any, y: Any, *, batch_size: Optional[int], shuffle: bool,
                   class_weight: Optional[Dict], sample_weight: Any, steps_per_epoch: Optional[int],
                   validation_data: Any, validation_split: float, validation_steps: Optional[int],
                   validation_batch_size: Optional[int] = None) -> Tuple[_LocalEpochs, Optional[_LocalEval]]:
        if validation_split and validation_data is None:
            (x, y, sample_weight), validation_data = split_arrays(x, y, sample_weight, validation_split)
        handler = self._handler(x, y, sample_weight, batch_size, shuffle, class_weight, "fit", steps_per_epoch)
        validation = None
        if validation_data is not None:
            vx, vy, vsw = split_validation(validation_data)
            validation = _LocalEval(self._handler(vx, vy, vsw, validation_batch_size or batch_size, False, None,
                                                  "evaluate", validation_steps), validation_steps)
        return _LocalEpochs(handler, steps_per_epoch, self.loop.train_loop_state), validation

    def eval_input(self, x: Any, y: Any, *, batch_size: Optional[int], sample_weight: Any,
                   steps: Optional[int]) -> _LocalEval:
        return _LocalEval(self._handler(x, y, sample_weight, batch_size, False, None, "evaluate", steps), steps)

    def predict_input(self, x: Any, *, batch_size: Optional[int], steps: Optional[int]) -> _LocalEval:
        """The input of one `predict` (which always runs here: the predictions are wanted here)."""
        return _LocalEval(self._handler(x, None, None, batch_size, False, None, "predict", steps), steps)

    def execute(self, phase: Phase, iterator: Iterator[Any], steps: int,
                on_begin: Callable[[], None]) -> Execution:
        step = self.loop.step_function(phase)
        results: List[Any] = []
        for _ in range(steps):
            try:
                batch, global_batch_size = next(iterator)
            except StopIteration:
                break
            if not results:
                on_begin()
            results.append(step(batch, global_batch_size))
        return Execution(steps=len(results), results=results)

    def resolve(self) -> int:
        return 0
