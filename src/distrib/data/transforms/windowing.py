"""``window``, ``rebatch`` and ``ragged_batch`` with tf.data's semantics.

* ``window(size, shift=None, stride=1, drop_remainder=False)``: window ``k``
  holds the input elements ``k*shift + j*stride`` for ``j < size``; windows
  start while ``k*shift`` is inside the input, so the last ones may be short
  (dropped with ``drop_remainder``). Each window is a `Dataset`; for a tuple
  or dict element the window is a tuple or dict of datasets, one per
  component, as in tf.data.
* ``rebatch(batch_size, drop_remainder=False)``: the rows of the input's
  batches regrouped into batches of ``batch_size`` (a list of sizes is used
  in turn), like ``unbatch().batch(...)``.
* ``ragged_batch(batch_size, drop_remainder=False)``: distrib has no ragged
  tensors. A component whose shape varies between elements (an unknown
  dimension in the input's spec; when the spec is not known statically, every
  non-scalar component) becomes a `RaggedList`, a Python list of the rows'
  tensors; components of fixed shape are stacked as in ``batch``.

Positions are exact across checkpoints: ``window`` saves the input's state
before the next window's first element (windows are rebuilt by re-reading),
``rebatch`` its unbatched input's state and where it is in the size list.

Example:
    >>> [[int(v) for v in w] for w in Dataset.range(7).window(3, 2)]
    [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6]]
    >>> [b.tolist() for b in Dataset.range(6).batch(4).rebatch([1, 2])]
    [[0], [1, 2], [3], [4, 5]]
    >>> next(iter(Dataset.range(1, 4).map(lambda n: torch.ones(int(n))).ragged_batch(2)))
    [tensor([1.]), tensor([1., 1.])]
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Union

import torch

from distrib.data.transforms.batching import UnbatchDataset
from distrib.data.blocks import Block, ListBlock, build_batch, materialize
from distrib.data.dataset import Dataset
from distrib.data.ragged import RaggedList
from distrib.data.transforms.element_state import END, DatasetSpec, ListDataset, Reader, input_spec
from distrib.data.options import INFINITE, UNKNOWN
from distrib.data.stream import BlockIterator, IterContext, pull
from distrib.data.structure import (TensorSpec, batched_spec, leaves, map_leaves, stack_structures,
                                    unbatched_spec)
from distrib.data.transforms.elementwise import _Unary

__all__ = ["WindowDataset", "RebatchDataset", "RaggedBatchDataset", "RaggedList", "RaggedSpec"]

Lineage = Tuple[int, ...]


def _positive(value: Any, what: str, where: str) -> int:
    if int(value) < 1:
        raise ValueError(f"{where}: {what} must be >= 1, got {value}")
    return int(value)


# ---------------------------------------------------------------------- window
class WindowDataset(_Unary):
    def __init__(self, input_dataset: Dataset, size: int, shift: Optional[int], stride: int,
                 drop_remainder: bool) -> None:
        super().__init__(input_dataset)
        self._size = _positive(size, "size", "window")
        self._shift = _positive(size if shift is None else shift, "shift", "window")
        self._stride = _positive(stride, "stride", "window")
        self._drop = bool(drop_remainder)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        if not self._drop:
            return -(-n // self._shift)
        span = (self._size - 1) * self._stride + 1
        return 0 if n < span else (n - span) // self._shift + 1

    def _static_spec(self) -> Any:
        return map_leaves(DatasetSpec, self._input.element_spec)

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        inner = self._input._iterator(ctx, lineage, state["in"] if state else None)
        return _WindowIterator(self, inner, state)

    def window_value(self, rows: List[Any]) -> Any:
        """One window: a dataset, or a structure of per-component datasets."""
        spec = input_spec(self)
        if isinstance(spec, TensorSpec):
            return ListDataset(rows, spec)
        columns = list(zip(*[leaves(r) for r in rows]))
        specs = iter(leaves(spec))
        parts = iter([ListDataset(list(c), next(specs)) for c in columns])
        return map_leaves(lambda _: next(parts), rows[0])


class _WindowIterator(BlockIterator):
    """Buffers the elements of the current window; saves the input's state before its first one."""

    def __init__(self, node: WindowDataset, inner: BlockIterator, state: Optional[dict]) -> None:
        self._node, self._reader = node, Reader(inner)
        self._skip = int(state["skip"]) if state else 0
        self._done = bool(state["done"]) if state else False
        self._buffer: List[Tuple[dict, Any]] = []  # (input state before the element, element)

    def next_block(self, limit: int) -> Optional[Block]:
        node = self._node
        if self._done:
            return None
        while self._skip > 0:
            _, value = self._reader.read()
            if value is END:
                self._done = True
                return None
            self._skip -= 1
        want = (node._size - 1) * node._stride + 1
        while len(self._buffer) < want:
            before, value = self._reader.read()
            if value is END:
                break
            self._buffer.append((before, value))
        if not self._buffer or (node._drop and len(self._buffer) < want):
            self._done = True
            return None
        rows = [value for _, value in self._buffer[::node._stride]]
        drop = min(node._shift, len(self._buffer))
        self._skip = node._shift - drop
        self._buffer = self._buffer[drop:]
        return ListBlock([node.window_value(rows)])

    def state(self) -> dict:
        at = self._buffer[0][0] if self._buffer else self._reader.inner.state()
        return {"in": at, "skip": self._skip, "done": self._done}


# --------------------------------------------------------------------- rebatch
class RebatchDataset(_Unary):
    def __init__(self, input_dataset: Dataset, batch_size: Union[int, Sequence[int]],
                 drop_remainder: bool) -> None:
        super().__init__(input_dataset)
        sizes = list(batch_size) if isinstance(batch_size, (list, tuple)) else [batch_size]
        if not sizes:
            raise ValueError("rebatch: batch_size must be an int or a non-empty list of ints")
        self._sizes = [_positive(s, "batch_size", "rebatch") for s in sizes]
        self._drop = bool(drop_remainder)
        self._rows = UnbatchDataset(input_dataset)

    def _with_inputs(self, inputs: Sequence[Dataset]) -> "Dataset":
        clone = super()._with_inputs(inputs)
        clone._rows = UnbatchDataset(clone._input)
        return clone

    def _static_spec(self) -> Any:
        fixed = self._drop and len(set(self._sizes)) == 1
        return batched_spec(unbatched_spec(self._input.element_spec), self._sizes[0] if fixed else None)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        return n if n in (INFINITE, 0) else UNKNOWN

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        rows = self._rows._iterator(ctx, lineage, state["in"] if state else None)
        return _RebatchIterator(self._sizes, self._drop, rows, int(state["k"]) if state else 0)


class _RebatchIterator(BlockIterator):
    def __init__(self, sizes: List[int], drop: bool, rows: BlockIterator, k: int) -> None:
        self._sizes, self._drop, self._in, self._k = sizes, drop, rows, k
        self._done = False

    def next_block(self, limit: int) -> Optional[Block]:
        if self._done:
            return None
        size = self._sizes[self._k % len(self._sizes)]
        blocks = pull(self._in, size)
        have = sum(len(b) for b in blocks)
        self._done = have < size
        if not blocks or (have < size and self._drop):
            self._done = True
            return None
        self._k = (self._k + 1) % len(self._sizes)
        return ListBlock([build_batch(blocks)])

    def state(self) -> dict:
        return {"in": self._in.state(), "k": self._k}


# ---------------------------------------------------------------- ragged_batch
class RaggedSpec(TensorSpec):
    """The spec of a `RaggedList` component: ``shape[1:]`` has None where rows differ."""


class RaggedBatchDataset(_Unary):
    def __init__(self, input_dataset: Dataset, batch_size: int, drop_remainder: bool) -> None:
        super().__init__(input_dataset)
        self._size = _positive(batch_size, "batch_size", "ragged_batch")
        self._drop = bool(drop_remainder)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        return n // self._size if self._drop else -(-n // self._size)

    def _ragged(self) -> List[bool]:
        flags = self.__dict__.get("_ragged_cache")
        if flags is None:
            static = self._input._static_spec()
            flags = ([s.shape is None or None in s.shape for s in leaves(static)] if static is not None
                     else [len(s.shape) > 0 for s in leaves(input_spec(self))])
            self.__dict__["_ragged_cache"] = flags
        return flags

    def _static_spec(self) -> Any:
        flags = iter(self._ragged())
        batch = self._size if self._drop else None

        def one(s: TensorSpec) -> TensorSpec:
            if next(flags):
                return RaggedSpec((batch,) + tuple(None for _ in (s.shape or ())), s.dtype)
            return TensorSpec((batch,) + tuple(s.shape), s.dtype)
        return map_leaves(one, self._input.element_spec)

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        inner = self._input._iterator(ctx, lineage, state["in"] if state else None)
        return _RaggedIterator(self, inner)

    def build(self, rows: List[Any]) -> Any:
        flags = self._ragged()
        columns = list(zip(*[leaves(r) for r in rows]))
        built = iter([RaggedList(torch.as_tensor(v) if not isinstance(v, torch.Tensor) else v for v in col)
                      if ragged else stack_structures(list(col)) for col, ragged in zip(columns, flags)])
        if isinstance(rows[0], torch.Tensor):
            return next(built)
        return map_leaves(lambda _: next(built), rows[0])


class _RaggedIterator(BlockIterator):
    def __init__(self, node: RaggedBatchDataset, inner: BlockIterator) -> None:
        self._node, self._in = node, inner
        self._done = False

    def next_block(self, limit: int) -> Optional[Block]:
        if self._done:
            return None
        rows: List[Any] = []
        while len(rows) < self._node._size:
            block = self._in.next_block(self._node._size - len(rows))
            if block is None:
                self._done = True
                break
            rows.extend(materialize(e) for e in block.elements())
        if not rows or (self._node._drop and len(rows) < self._node._size):
            self._done = True
            return None
        return ListBlock([self._node.build(rows)])

    def state(self) -> dict:
        return {"in": self._in.state()}
