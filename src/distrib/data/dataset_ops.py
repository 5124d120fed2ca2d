"""The tf.data operators added to `Dataset` beyond the core ones (a mixin, to keep files small).

Each method names its implementation module; see there for the exact
semantics and how the position is checkpointed: `distrib.data.transforms.windowing`
(window, rebatch, ragged_batch), `distrib.data.transforms.folds` (scan, unique,
take_while, reduce, get_single_element), `distrib.data.transforms.grouping`
(group_by_window, bucket_by_sequence_length), `distrib.data.transforms.choosing`
(choose_from_datasets, sample_from_datasets, counter).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

from distrib.data.operator_table import operator

__all__ = ["DatasetOps"]


class DatasetOps:
    """tf.data's windowing, folding, grouping and choosing operators."""

    def window(self, size: int, shift: Optional[int] = None, stride: int = 1, drop_remainder: bool = False,
               name: Optional[str] = None) -> Any:
        """Windows of ``size`` elements starting every ``shift``, taking every ``stride``-th; each a `Dataset`."""
        return operator("WindowDataset")(self, size, shift, stride, drop_remainder)

    def rebatch(self, batch_size: Union[int, Sequence[int]], drop_remainder: bool = False,
                name: Optional[str] = None) -> Any:
        """The batches' rows regrouped into batches of ``batch_size`` (a list: used in turn)."""
        return operator("RebatchDataset")(self, batch_size, drop_remainder)

    def ragged_batch(self, batch_size: int, drop_remainder: bool = False, row_splits_dtype: Any = None,
                     name: Optional[str] = None) -> Any:
        """Batches whose varying-shape components are `distrib.data.transforms.windowing.RaggedList` s of tensors."""
        return operator("RaggedBatchDataset")(self, batch_size, drop_remainder)

    def scan(self, initial_state: Any, scan_func: Callable, name: Optional[str] = None) -> Any:
        """The outputs of ``scan_func(state, element) -> (new_state, output)`` folded over the elements."""
        return operator("ScanDataset")(self, initial_state, scan_func)

    def unique(self, name: Optional[str] = None) -> Any:
        """The first occurrence of every element (int32, int64 or string scalars)."""
        return operator("UniqueDataset")(self)

    def take_while(self, predicate: Callable, name: Optional[str] = None) -> Any:
        """The elements before the first one for which ``predicate`` is false."""
        return operator("TakeWhileDataset")(self, predicate)

    def reduce(self, initial_state: Any, reduce_func: Callable, name: Optional[str] = None) -> Any:
        """``reduce_func(state, element)`` folded over every element; the final state."""
        return operator("reduce_dataset")(self, initial_state, reduce_func)

    def get_single_element(self, name: Optional[str] = None) -> Any:
        """The dataset's only element (an error if it has none or several)."""
        return operator("single_element")(self)

    def group_by_window(self, key_func: Callable, reduce_func: Callable, window_size: Optional[int] = None,
                        window_size_func: Optional[Callable] = None, name: Optional[str] = None) -> Any:
        """Elements grouped by ``key_func``; each full window becomes ``reduce_func(key, window_dataset)``."""
        return operator("GroupByWindowDataset")(self, key_func, reduce_func, window_size, window_size_func)

    def bucket_by_sequence_length(self, element_length_func: Callable, bucket_boundaries: Sequence[int],
                                  bucket_batch_sizes: Sequence[int], padded_shapes: Any = None,
                                  padding_values: Any = None, pad_to_bucket_boundary: bool = False,
                                  no_padding: bool = False, drop_remainder: bool = False,
                                  name: Optional[str] = None) -> Any:
        """Elements batched (padded) together with others of similar length, as in tf.data."""
        return operator("bucket_by_sequence_length")(self, element_length_func, bucket_boundaries, bucket_batch_sizes,
                                         padded_shapes, padding_values, pad_to_bucket_boundary, no_padding,
                                         drop_remainder)

    @staticmethod
    def choose_from_datasets(datasets: Sequence[Any], choice_dataset: Any,
                             stop_on_empty_dataset: bool = True) -> Any:
        """The next element of ``datasets[c]`` for each choice ``c`` of ``choice_dataset``."""
        return operator("choose_from_datasets")(datasets, choice_dataset, stop_on_empty_dataset)

    @staticmethod
    def sample_from_datasets(datasets: Sequence[Any], weights: Optional[Sequence[float]] = None,
                             seed: Optional[int] = None, stop_on_empty_dataset: bool = False,
                             rerandomize_each_iteration: Optional[bool] = None) -> Any:
        """Elements of ``datasets`` drawn at random with probabilities ``weights`` (distrib's own order)."""
        return operator("sample_from_datasets")(datasets, weights, seed, stop_on_empty_dataset, rerandomize_each_iteration)

    @staticmethod
    def counter(start: int = 0, step: int = 1, dtype: Any = None, name: Optional[str] = None) -> Any:
        """``start, start + step, ...`` forever (int64 unless ``dtype``)."""
        return operator("CounterDataset")(start, step, dtype)
