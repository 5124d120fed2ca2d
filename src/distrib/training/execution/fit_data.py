"""What `fit` needs around the step loop: argument checks, validation data, the iterator of each epoch.

Which iterator each epoch gets (Keras's rules) is `EpochIterators`'s docstring.
Validation data is ``validation_data`` (a dataset, ``(x, y)`` or
``(x, y, sample_weight)``) or, for array inputs, the last
``validation_split`` fraction of the examples, taken before shuffling.

Example (``validation_split=0.2`` on 10 examples): training uses rows 0-7,
validation rows 8 and 9.
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Iterator, Optional, Tuple

import torch

from distrib.training.execution.data_adapter import DataHandler, count_rows, is_array_structure
from distrib.utils.nest import map_structure

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy
    from distrib.training.execution.loop_state import TrainLoopState

__all__ = ["OUT_OF_DATA_WARNING", "PASS_ENDED_WARNING", "validate_fit_args", "should_validate", "draw_seed", "EpochIterators",
           "split_validation", "split_arrays"]

OUT_OF_DATA_WARNING = (
    "Your input ran out of data; interrupting training. Make sure that your dataset or generator can "
    "generate at least `steps_per_epoch * epochs` batches ({needed} here; it ran out after {seen}). "
    "You may need to use the `.repeat()` function when building your dataset.")
PASS_ENDED_WARNING = (
    "Your input ran out of data: an epoch of steps_per_epoch={steps} reached the end of the data ({batches} "
    "batches{of} a pass), so it ended there and the next epoch starts a new pass (as Keras 3 does). For epochs "
    "of equal length pass a steps_per_epoch that divides {batches}, or repeat the dataset (.repeat()).")


def validate_fit_args(epochs: int, initial_epoch: int, steps_per_epoch: Optional[int], validation_freq: Any,
                      validation_split: float = 0.0) -> None:
    """Raise a one-line ValueError naming the first bad `fit` argument."""
    if not isinstance(epochs, int) or epochs < 0:
        raise ValueError(f"fit(epochs=...) must be a non-negative int, got {epochs!r}")
    if not isinstance(initial_epoch, int) or initial_epoch < 0:
        raise ValueError(f"fit(initial_epoch=...) must be a non-negative int, got {initial_epoch!r}")
    if steps_per_epoch is not None and (not isinstance(steps_per_epoch, int) or steps_per_epoch < 1):
        raise ValueError(f"fit(steps_per_epoch=...) must be a positive int or None, got {steps_per_epoch!r}")
    if isinstance(validation_freq, int):
        if validation_freq < 1:
            raise ValueError(f"fit(validation_freq=...) must be >= 1, got {validation_freq!r}")
    elif not (isinstance(validation_freq, (list, tuple, set)) and all(isinstance(e, int) for e in validation_freq)):
        raise ValueError(f"fit(validation_freq=...) must be an int or a list of epochs, got {validation_freq!r}")
    if isinstance(validation_split, bool) or not isinstance(validation_split, (int, float)) \
            or not 0.0 <= validation_split < 1.0:
        raise ValueError(f"fit(validation_split=...) must be a float in [0, 1), got {validation_split!r}")


def should_validate(epoch: int, validation_freq: Any) -> bool:
    """Whether `fit` validates after ``epoch`` (0-based) under ``validation_freq``."""
    if isinstance(validation_freq, int):
        return (epoch + 1) % validation_freq == 0
    return (epoch + 1) in validation_freq


def draw_seed(strategy: "Strategy") -> int:
    """A shuffle seed drawn from the chief's torch RNG, the same on every worker."""
    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    if strategy.multi_replica:
        seed = int(strategy.collective.broadcast_json(seed, src=0))
    return seed


def split_validation(validation_data: Any) -> Tuple[Any, Any, Any]:
    """``(x, y, sample_weight)`` from ``validation_data``: a dataset or a tuple of arrays."""
    if isinstance(validation_data, (list, tuple)):
        if len(validation_data) == 2:
            return validation_data[0], validation_data[1], None
        if len(validation_data) == 3:
            return validation_data[0], validation_data[1], validation_data[2]
        raise ValueError(f"validation_data must be a dataset, (x, y) or (x, y, sample_weight); "
                         f"got a sequence of {len(validation_data)} items")
    return validation_data, None, None


def split_arrays(x: Any, y: Any, sample_weight: Any, validation_split: float) -> Tuple[Tuple[Any, Any, Any],
                                                                                        Tuple[Any, Any, Any]]:
    """``((x, y, sw) to train on, (x, y, sw) to validate on)``: the last ``validation_split`` of the rows.

    Example:
        >>> (tx, ty, _), (vx, vy, _) = split_arrays(np.arange(10), np.arange(10), None, 0.2)
        >>> len(tx), list(vx)
        (8, [8, 9])
    """
    if not is_array_structure(x):
        raise ValueError(f"fit(validation_split=...) needs x as arrays or tensors, got a {type(x).__name__}; "
                         "pass validation_data=... for datasets and loaders")
    n = count_rows(x, "x")
    split_at = int(n * (1.0 - validation_split))
    if split_at == 0 or split_at == n:
        raise ValueError(f"fit(validation_split={validation_split}) leaves no examples to "
                         f"{'train on' if split_at == 0 else 'validate on'} out of {n}; use a split between "
                         f"{1 / max(n, 1):.3g} and {1 - 1 / max(n, 1):.3g}")

    def part(value: Any, lo: int, hi: Optional[int]) -> Any:
        return None if value is None else map_structure(lambda t: t[lo:hi], value)
    return ((part(x, 0, split_at), part(y, 0, split_at), part(sample_weight, 0, split_at)),
            (part(x, split_at, None), part(y, split_at, None), part(sample_weight, split_at, None)))


class EpochIterators:
    """Hands out the iterator for each epoch.

    Rules (Keras 2 / tf.keras):

    * without ``steps_per_epoch``, or with it equal to the dataset's known
      number of batches, every epoch iterates the data once from a fresh iterator
      (arrays are reshuffled per epoch, seeded identically on every worker);
    * otherwise one iterator runs across epochs (``dataset.repeat()`` and
      ``steps_per_epoch=70`` as in TensorFlow's multi-worker Keras tutorial);
    * where a pass's batches are known (arrays, a finite dataset), Keras 3's
      epoch iterator: an epoch also ends where the pass does (fit warns when
      that cuts it short of ``steps_per_epoch``) and the next epoch starts a
      new pass, so training goes on;
    * where they are not (a ``filter``, a generator) and the data runs out,
      fit warns, ends the epoch and stops training (Keras 2's rule).

    Example (10 rows, ``batch_size=4``: 3 batches a pass): with
    ``steps_per_epoch=2`` the epochs run 2, 1, 2, 1, ... steps; with
    ``steps_per_epoch=5``, 3 steps each (a warning for each epoch cut short).

    Args:
        handler: the training data.
        steps_per_epoch: `fit`'s argument.
        state: the `TrainLoopState`; a restored data position is applied to the
            iterator it belongs to, and the live handler is attached to it.
    """

    def __init__(self, handler: DataHandler, steps_per_epoch: Optional[int], state: "TrainLoopState") -> None:
        known = handler.steps_per_pass
        self.handler = handler
        self.per_epoch = steps_per_epoch is None or (known is not None and steps_per_epoch == known)
        self.steps = steps_per_epoch if steps_per_epoch is not None else known
        #: Known batches per pass and steps_per_epoch: an epoch also ends with the pass (Keras 3).
        self.pass_ends_epoch = not self.per_epoch and known is not None
        self.state = state
        self._shared: Optional[Any] = None

    def for_epoch(self, first_step: int, restored: bool) -> Iterator[Any]:
        """The iterator of the epoch that starts at ``first_step`` (past 0 on a mid-epoch resume)."""
        if restored:
            # Resuming at an epoch boundary starts the next pass; mid-epoch continues the saved one.
            position = not (self.per_epoch and first_step == 0)
            self.state.data_position.apply(lambda saved: self.handler.load_state_dict(saved, position=position))
            self._shared = None
        if self.pass_ends_epoch and self._shared is not None and self._shared.steps_taken >= self.handler.steps_per_pass:
            self._shared = None  # the last epoch ended the pass
        if self.per_epoch or self._shared is None:
            it = self.handler.make_iterator()
            if self.pass_ends_epoch and first_step == 0 and it.steps_taken >= self.handler.steps_per_pass:
                it = self.handler.make_iterator()  # a pass restored at its end: this epoch starts the next
            if not self.per_epoch:
                self._shared = it
        else:
            it = self._shared
        self.state.attach_iterator(self.handler)
        if self.pass_ends_epoch:
            left = self.handler.steps_per_pass - it.steps_taken
            return itertools.islice(it, max(0, min(left, self.steps - first_step)))
        return it

