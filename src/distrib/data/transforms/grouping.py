"""``group_by_window`` and ``bucket_by_sequence_length`` with tf.data's semantics.

``group_by_window(key_func, reduce_func, window_size=None, window_size_func=None)``
sorts elements into groups by ``key_func(element)`` (an integer; tuple
components are passed as arguments). When a group holds its window size
(``window_size``, or ``window_size_func(key)``) the elements of
``reduce_func(key, window)`` are produced, ``window`` being a `Dataset` of
the group's elements. When the input ends, the groups left are reduced in
increasing key order (TensorFlow keeps its groups in an ordered map).

``bucket_by_sequence_length`` is built on it as in TensorFlow: the bucket of
an element of length ``L`` is the ``i`` with ``boundaries[i-1] <= L <
boundaries[i]``, and a full bucket is ``padded_batch``-ed (``batch``-ed with
``no_padding``); ``pad_to_bucket_boundary`` pads unknown dimensions to
``boundary - 1``.

Checkpoints hold the open groups' elements (as JSON) and the window being
reduced (re-reduced on restore, then advanced to the saved position).

Example:
    >>> ds = Dataset.range(10).group_by_window(lambda x: x % 2, lambda k, w: w.batch(5), window_size=5)
    >>> [b.tolist() for b in ds]
    [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from distrib.data.blocks import Block, ListBlock, materialize
from distrib.data.dataset import Dataset
from distrib.data.transforms.element_state import ListDataset, decode, encode, input_spec
from distrib.data.options import INFINITE
from distrib.data.stream import BlockIterator, IterContext
from distrib.data.structure import TensorSpec, call_unpacked, map_leaves
from distrib.data.transforms.elementwise import _Unary

__all__ = ["GroupByWindowDataset", "bucket_by_sequence_length"]

Lineage = Tuple[int, ...]


def _int(value: Any, what: str) -> int:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"group_by_window: {what} must return an integer scalar, got shape "
                             f"{tuple(value.shape)}")
        value = value.item()
    return int(value)


class GroupByWindowDataset(_Unary):
    def __init__(self, input_dataset: Dataset, key_func: Callable, reduce_func: Callable,
                 window_size: Optional[int], window_size_func: Optional[Callable]) -> None:
        super().__init__(input_dataset)
        if (window_size is None) == (window_size_func is None):
            raise ValueError("group_by_window: give exactly one of window_size and window_size_func")
        if not callable(key_func) or not callable(reduce_func):
            raise TypeError("group_by_window: key_func and reduce_func must be functions")
        self._key, self._reduce = key_func, reduce_func
        self._size_fn = window_size_func or (lambda _k: window_size)
        self._loose = False

    def _cardinality(self) -> int:
        return INFINITE if self._input._cardinality() == INFINITE else -2

    def _static_spec(self) -> Any:
        """``reduce_func``'s dataset spec, traced on an empty window (as TF traces it).

        When that spec needs an element to be known (a ``map`` inside), the first
        element's spec with every dimension unknown: windows differ in size.
        """
        spec = None
        try:
            traced = self._reduce(torch.tensor(0, dtype=torch.int64), ListDataset([], self._input.element_spec))
            spec = traced._static_spec() if isinstance(traced, Dataset) else None
        except Exception:  # noqa: BLE001 - a reduce_func that cannot run on an empty window
            spec = None
        if spec is None:
            return None
        return map_leaves(lambda s: TensorSpec(tuple(None for _ in s.shape), s.dtype), spec) \
            if self._loose else spec

    @property
    def element_spec(self) -> Any:
        spec = self._static_spec()
        if spec is not None:
            return spec
        first = Dataset.element_spec.fget(self)
        return map_leaves(lambda s: TensorSpec(tuple(None for _ in s.shape), s.dtype), first)

    def window_size(self, key: int) -> int:
        size = _int(self._size_fn(torch.tensor(key, dtype=torch.int64)), "window_size_func")
        if size < 1:
            raise ValueError(f"group_by_window: the window size of key {key} must be >= 1, got {size}")
        return size

    def open(self, key: int, rows: List[Any]) -> BlockIterator:
        ds = self._reduce(torch.tensor(key, dtype=torch.int64), ListDataset(rows, input_spec(self)))
        if not isinstance(ds, Dataset):
            raise TypeError(f"group_by_window: reduce_func must return a distrib.data.Dataset, got "
                            f"{type(ds).__name__}")
        return ds, ds._iterator(IterContext(ds), (0,), None)

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        inner = self._input._iterator(ctx, lineage, state["in"] if state else None)
        return _GroupIterator(self, inner, state)


class _GroupIterator(BlockIterator):
    def __init__(self, node: GroupByWindowDataset, inner: BlockIterator, state: Optional[dict]) -> None:
        self._node, self._in = node, inner
        self._groups: Dict[int, List[Any]] = {}
        self._ended = False
        self._current: Optional[Tuple[int, List[Any], BlockIterator]] = None
        if state:
            self._groups = {int(k): [decode(e) for e in v] for k, v in state["groups"]}
            self._ended = bool(state["ended"])
            if state["current"] is not None:
                key, rows = int(state["current"]["key"]), [decode(e) for e in state["current"]["rows"]]
                ds, _ = node.open(key, rows)
                self._current = (key, rows, ds._iterator(IterContext(ds), (0,), state["current"]["inner"]))

    def _start(self, key: int, rows: List[Any]) -> None:
        _, it = self._node.open(key, rows)
        self._current = (key, rows, it)

    def next_block(self, limit: int) -> Optional[Block]:
        while True:
            if self._current is not None:
                block = self._current[2].next_block(min(limit, 256))
                if block is not None:
                    return ListBlock([materialize(e) for e in block.elements()])
                self._current = None
            if self._ended:
                if not self._groups:
                    return None
                key = min(self._groups)
                self._start(key, self._groups.pop(key))
                continue
            block = self._in.next_block(1)
            if block is None:
                self._ended = True
                continue
            element = materialize(block.elements()[0])
            key = _int(call_unpacked(self._node._key, element), "key_func")
            group = self._groups.setdefault(key, [])
            group.append(element)
            if len(group) >= self._node.window_size(key):
                self._start(key, self._groups.pop(key))

    def state(self) -> dict:
        current = None
        if self._current is not None:
            key, rows, it = self._current
            current = {"key": key, "rows": [encode(r) for r in rows], "inner": it.state()}
        return {"in": self._in.state(), "ended": self._ended, "current": current,
                "groups": [[k, [encode(e) for e in v]] for k, v in self._groups.items()]}


def _length_of(value: Any) -> int:
    return _int(value, "element_length_func")


def _fill_shapes(shapes: Any, fill: int) -> Any:
    """Unknown dimensions (None, -1) of a structure of shapes replaced by ``fill``."""
    if isinstance(shapes, dict):
        return {k: _fill_shapes(v, fill) for k, v in shapes.items()}
    if isinstance(shapes, (list, tuple)) and all(d is None or isinstance(d, int) for d in shapes):
        return [fill if d is None or d < 0 else d for d in shapes]
    if isinstance(shapes, (list, tuple)):
        return tuple(_fill_shapes(v, fill) for v in shapes)
    return shapes


def bucket_by_sequence_length(dataset: Dataset, element_length_func: Callable,
                              bucket_boundaries: Sequence[int], bucket_batch_sizes: Sequence[int],
                              padded_shapes: Any = None, padding_values: Any = None,
                              pad_to_bucket_boundary: bool = False, no_padding: bool = False,
                              drop_remainder: bool = False) -> Dataset:
    """`Dataset.bucket_by_sequence_length` (see the module docstring)."""
    boundaries = [int(b) for b in bucket_boundaries]
    sizes = [int(s) for s in bucket_batch_sizes]
    if len(sizes) != len(boundaries) + 1:
        raise ValueError(f"bucket_by_sequence_length: bucket_batch_sizes needs len(bucket_boundaries) + 1 = "
                         f"{len(boundaries) + 1} entries, got {len(sizes)}")
    if any(b >= c for b, c in zip(boundaries, boundaries[1:])):
        raise ValueError(f"bucket_by_sequence_length: bucket_boundaries must increase, got {boundaries}")

    def bucket(*args: Any) -> int:
        length = _length_of(element_length_func(*args))
        return sum(1 for b in boundaries if length >= b)

    def shapes_for(key: int) -> Any:
        if not pad_to_bucket_boundary:
            return padded_shapes
        if key >= len(boundaries):
            raise ValueError(f"bucket_by_sequence_length: with pad_to_bucket_boundary=True every length must "
                             f"be < the last boundary {boundaries[-1] if boundaries else None}")
        base = padded_shapes if padded_shapes is not None else map_leaves(
            lambda s: list(s.shape) if isinstance(s, TensorSpec) else s, dataset.element_spec)
        return _fill_shapes(base, boundaries[key] - 1)

    def reduce(key: torch.Tensor, window: Dataset) -> Dataset:
        k = int(key)
        if no_padding:
            return window.batch(sizes[k], drop_remainder=drop_remainder)
        return window.padded_batch(sizes[k], shapes_for(k), padding_values, drop_remainder=drop_remainder)

    grouped = GroupByWindowDataset(dataset, bucket, reduce, None, lambda key: sizes[int(key)])
    grouped._loose = True  # batch sizes and padded lengths differ per bucket (in TF: tensors, so unknown)
    return grouped
