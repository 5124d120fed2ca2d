"""Stateful element-wise operators and folds: ``scan``, ``unique``, ``take_while``, ``reduce``,
``get_single_element``.

As in tf.data:

* ``scan(initial_state, scan_func)``: ``scan_func(state, element)`` returns
  ``(new_state, output)``; the outputs are the elements. The element is passed
  as one argument (a tuple element stays a tuple).
* ``reduce(initial_state, reduce_func)``: the final state of the same fold
  (``initial_state`` when the dataset is empty).
* ``unique()``: the first occurrence of every value; elements must be int32,
  int64 or string scalars.
* ``take_while(predicate)``: elements up to (not including) the first one for
  which ``predicate`` (tuple components as arguments) is false.
* ``get_single_element()``: the only element; an error when there are none
  or several.

Python numbers in states follow tf.data's conversion (ints become int32,
floats float32). ``scan`` keeps its state in the iterator's checkpoint as
JSON (exactly), ``unique`` the values seen so far.

Example:
    >>> [int(v) for v in Dataset.range(5).scan(torch.tensor(0), lambda s, x: (s + x, s + x))]
    [0, 1, 3, 6, 10]
    >>> int(Dataset.range(5).reduce(torch.tensor(0), lambda s, x: s + x))
    10
    >>> [int(v) for v in Dataset.from_tensor_slices([3, 1, 3, 2, 1]).unique()]
    [3, 1, 2]
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import numpy as np
import torch

from distrib.data.blocks import Block, ListBlock, materialize
from distrib.data.dataset import Dataset
from distrib.data.transforms.element_state import decode, encode
from distrib.data.iterator import DatasetIterator
from distrib.data.options import INFINITE, UNKNOWN
from distrib.data.stream import BlockIterator, IterContext
from distrib.data.strings import is_string_leaf
from distrib.data.structure import call_unpacked, to_structure
from distrib.data.transforms.elementwise import _Unary, _truth
from distrib.errors import DistribError

__all__ = ["ScanDataset", "UniqueDataset", "TakeWhileDataset", "reduce_dataset", "single_element",
           "InvalidArgumentError"]

Lineage = Tuple[int, ...]


class InvalidArgumentError(DistribError, ValueError):
    """The data does not fit the operation (``tf.errors.InvalidArgumentError``'s role)."""


def _step(fn: Callable, state: Any, element: Any, where: str) -> Tuple[Any, Any]:
    out = fn(state, element)
    if not isinstance(out, tuple) or len(out) != 2:
        raise TypeError(f"{where}: the function must return (new_state, output_element), got "
                        f"{type(out).__name__}")
    return to_structure(out[0]), to_structure(out[1])


# ------------------------------------------------------------------------ scan
class ScanDataset(_Unary):
    def __init__(self, input_dataset: Dataset, initial_state: Any, scan_func: Callable) -> None:
        super().__init__(input_dataset)
        if not callable(scan_func):
            raise TypeError(f"scan needs a function (state, element) -> (state, output), got "
                            f"{type(scan_func).__name__}")
        self._initial, self._fn = to_structure(initial_state), scan_func

    def _static_spec(self) -> Any:
        return None

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        inner = self._input._iterator(ctx, lineage, state["in"] if state else None)
        current = decode(state["state"]) if state else self._initial
        return _ScanIterator(self._fn, inner, current)


class _ScanIterator(BlockIterator):
    def __init__(self, fn: Callable, inner: BlockIterator, current: Any) -> None:
        self._fn, self._in, self._state = fn, inner, current

    def next_block(self, limit: int) -> Optional[Block]:
        block = self._in.next_block(min(limit, 256))
        if block is None:
            return None
        outputs = []
        for element in block.elements():
            self._state, out = _step(self._fn, self._state, materialize(element), "scan")
            outputs.append(out)
        return ListBlock(outputs)

    def state(self) -> dict:
        return {"in": self._in.state(), "state": encode(self._state)}


# ---------------------------------------------------------------------- unique
def _unique_key(value: Any) -> Any:
    if is_string_leaf(value) and np.ndim(value) == 0:
        return str(value)
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.dtype in (torch.int32, torch.int64):
        return int(value)
    what = value.dtype if isinstance(value, torch.Tensor) else type(value).__name__
    raise TypeError(f"unique: elements must be int32, int64 or string scalars (as in tf.data), got {what} "
                    f"of shape {tuple(np.shape(value))}")


class UniqueDataset(_Unary):
    def _cardinality(self) -> int:
        n = self._input._cardinality()
        return n if n == 0 else UNKNOWN

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        inner = self._input._iterator(ctx, lineage, state["in"] if state else None)
        return _UniqueIterator(inner, state["seen"] if state else [])


class _UniqueIterator(BlockIterator):
    def __init__(self, inner: BlockIterator, seen: List[Any]) -> None:
        self._in = inner
        self._order: List[Any] = list(seen)
        self._seen = set(self._order)

    def next_block(self, limit: int) -> Optional[Block]:
        while True:
            block = self._in.next_block(min(limit, 256))
            if block is None:
                return None
            kept = []
            for element in block.elements():
                value = materialize(element)
                key = _unique_key(value)
                if key not in self._seen:
                    self._seen.add(key)
                    self._order.append(key)
                    kept.append(value)
            if kept:
                return ListBlock(kept)

    def state(self) -> dict:
        return {"in": self._in.state(), "seen": list(self._order)}


# ------------------------------------------------------------------ take_while
class TakeWhileDataset(_Unary):
    def __init__(self, input_dataset: Dataset, predicate: Callable) -> None:
        super().__init__(input_dataset)
        if not callable(predicate):
            raise TypeError(f"take_while needs a predicate function, got {type(predicate).__name__}")
        self._predicate = predicate

    def _cardinality(self) -> int:
        return 0 if self._input._cardinality() == 0 else UNKNOWN

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        inner = self._input._iterator(ctx, lineage, state["in"] if state else None)
        return _TakeWhileIterator(self._predicate, inner, bool(state and state["done"]))


class _TakeWhileIterator(BlockIterator):
    def __init__(self, predicate: Callable, inner: BlockIterator, done: bool) -> None:
        self._predicate, self._in, self._done = predicate, inner, done

    def next_block(self, limit: int) -> Optional[Block]:
        if self._done:
            return None
        block = self._in.next_block(1)
        if block is None or not _truth(call_unpacked(self._predicate, materialize(block.elements()[0]))):
            self._done = True
            return None
        return block

    def state(self) -> dict:
        return {"in": self._in.state(), "done": self._done}


# ----------------------------------------------------------------------- folds
def reduce_dataset(dataset: Dataset, initial_state: Any, reduce_func: Callable) -> Any:
    """`Dataset.reduce`: fold every element into the state."""
    if dataset._cardinality() == INFINITE:
        raise ValueError("reduce: the dataset is infinite (repeat() without a count), so the fold never ends")
    state = to_structure(initial_state)
    for element in DatasetIterator(dataset, IterContext(dataset)):
        state = to_structure(reduce_func(state, element))
    return state


def single_element(dataset: Dataset) -> Any:
    """`Dataset.get_single_element`: the only element."""
    it = DatasetIterator(dataset, IterContext(dataset))
    first = next(it, None)
    if first is None:
        raise InvalidArgumentError("get_single_element: the dataset is empty (it must have exactly one element)")
    if it.next_element() is not None:
        raise InvalidArgumentError("get_single_element: the dataset has more than one element")
    return first
