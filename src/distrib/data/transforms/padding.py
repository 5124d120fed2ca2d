"""`padded_batch`: batches of elements whose shapes differ, padded to a common shape.

As tf.data: each component is padded at the end of every dimension, to the
largest size in the batch (``padded_shapes`` entries ``None`` or -1, the
default) or to a fixed size (an int; an element larger than it is an error).
``padding_values`` gives the fill per component (default 0, ``""`` for
strings). ``drop_remainder`` drops a final partial batch.

Example:
    >>> ds = Dataset.range(1, 4).map(lambda n: torch.full((int(n),), int(n)))
    >>> [b.tolist() for b in ds.padded_batch(2)]
    [[[1, 0], [2, 2]], [[3, 3, 3]]]
    >>> next(iter(ds.padded_batch(2, padded_shapes=[4], padding_values=-1))).tolist()
    [[1, -1, -1, -1], [2, 2, -1, -1]]
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from distrib.data.blocks import Block, ListBlock, materialize
from distrib.data.dataset import Dataset
from distrib.data.options import INFINITE, UNKNOWN
from distrib.data.stream import BlockIterator, IterContext, pull
from distrib.data.strings import is_binary
from distrib.data.structure import TensorSpec, leaves, map_leaves
from distrib.data.transforms.elementwise import _Unary

__all__ = ["PaddedBatchDataset"]


def _broadcast(value: Any, like: Any, what: str) -> Any:
    """``value`` given once for every leaf of ``like``, or a structure matching it."""
    if value is None or not isinstance(value, (tuple, dict)) or isinstance(like, TensorSpec):
        if isinstance(like, TensorSpec):
            return value
        return map_leaves(lambda _: value, like)
    if isinstance(like, dict):
        if not isinstance(value, dict) or set(value) != set(like):
            raise ValueError(f"padded_batch: {what} must have the element's keys {sorted(like)}")
        return {k: _broadcast(value[k], like[k], what) for k in like}
    if not isinstance(value, tuple) or len(value) != len(like):
        raise ValueError(f"padded_batch: {what} must have one entry per component of the element "
                         f"({len(like)})")
    return tuple(_broadcast(v, s, what) for v, s in zip(value, like))


class PaddedBatchDataset(_Unary):
    """`Dataset.padded_batch`."""

    def __init__(self, input_dataset: Dataset, batch_size: int, padded_shapes: Any,
                 padding_values: Any, drop_remainder: bool) -> None:
        super().__init__(input_dataset)
        if int(batch_size) < 1:
            raise ValueError(f"padded_batch: batch_size must be >= 1, got {batch_size}")
        self.batch_size, self.drop_remainder = int(batch_size), bool(drop_remainder)
        self._shapes, self._values = padded_shapes, padding_values

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        return n // self.batch_size if self.drop_remainder else -(-n // self.batch_size)

    def _static_spec(self) -> Any:
        """Batch dimension None unless ``drop_remainder``; padded dimensions as ``padded_shapes`` says.

        Without ``padded_shapes``, a dimension is the input's static one (None when
        unknown); when the input's spec is only known from its first element (after
        ``map``), every padded dimension is None, since padding exists for shapes that vary.
        """
        static = self._input._static_spec()
        spec = static if static is not None else self._input.element_spec
        shapes = _broadcast(_as_shape_structure(self._shapes), spec, "padded_shapes")
        flat = iter(leaves(shapes) if shapes is not None else [None] * len(leaves(spec)))
        batch = self.batch_size if self.drop_remainder else None

        def one(s: TensorSpec) -> TensorSpec:
            shape = next(flat)
            dims = shape.dims if shape is not None else (s.shape if static is not None else [None] * len(s.shape))
            return TensorSpec((batch,) + tuple(dims), s.dtype)
        return map_leaves(one, spec)

    def _iterator(self, ctx: IterContext, lineage: Tuple[int, ...], state: Optional[dict]) -> BlockIterator:
        inner = self._input._iterator(ctx, lineage, state["in"] if state else None)
        return _PaddedIterator(self, inner)

    def pad(self, elements: List[Any]) -> Any:
        """The padded batch of ``elements``."""
        first = elements[0]
        shapes = _broadcast(_as_shape_structure(self._shapes), first, "padded_shapes")
        values = _broadcast(self._values, first, "padding_values")
        flat_shapes = leaves(shapes) if shapes is not None else [None] * len(leaves(first))
        flat_values = leaves(values) if values is not None else [None] * len(leaves(first))
        columns = list(zip(*[leaves(e) for e in elements]))
        padded = [_pad_column(list(col), shape, value)
                  for col, shape, value in zip(columns, flat_shapes, flat_values)]
        it = iter(padded)
        return map_leaves(lambda _: next(it), first)


class _Shape:
    """Marks a padded shape (a list/tuple of ints) as one leaf."""

    def __init__(self, dims: Sequence[Any]) -> None:
        self.dims = [None if d is None or int(d) < 0 else int(d) for d in dims]


def _as_shape_structure(shapes: Any) -> Any:
    if shapes is None:
        return None
    if isinstance(shapes, torch.Size) or (isinstance(shapes, (list, tuple)) and all(
            d is None or isinstance(d, (int, np.integer)) for d in shapes)):
        return _Shape(list(shapes))
    if isinstance(shapes, dict):
        return {k: _as_shape_structure(v) for k, v in shapes.items()}
    if isinstance(shapes, tuple):
        return tuple(_as_shape_structure(v) for v in shapes)
    raise TypeError(f"padded_batch: padded_shapes must be lists of ints/None nested like the element, "
                    f"got {shapes!r}")


def _pad_column(parts: List[Any], shape: Optional[_Shape], value: Any) -> Any:
    is_str = not isinstance(parts[0], torch.Tensor)
    dims = [np.shape(p) for p in parts]
    ranks = {len(d) for d in dims}
    if len(ranks) != 1:
        raise ValueError(f"padded_batch: elements have different ranks {sorted(ranks)}")
    rank = ranks.pop()
    target = [max(d[i] for d in dims) for i in range(rank)]
    if shape is not None:
        if len(shape.dims) != rank:
            raise ValueError(f"padded_batch: padded shape {shape.dims} has rank {len(shape.dims)}, "
                             f"the component has rank {rank}")
        for i, want in enumerate(shape.dims):
            if want is not None:
                if target[i] > want:
                    raise ValueError(f"padded_batch: a component of shape {list(max(dims))} does not fit "
                                     f"padded shape {shape.dims} (dimension {i}): raise padded_shapes")
                target[i] = want
    if is_str:
        binary = is_binary(parts[0])  # bytes stay bytes (TFRecord records), padded with b""
        blank = (b"" if binary else "") if value is None else (value if binary and isinstance(value, bytes)
                                                              else str(value))
        out = np.full([len(parts)] + target, blank, dtype=object)
        for k, p in enumerate(parts):
            out[(k,) + tuple(slice(0, n) for n in np.shape(p))] = p
        if binary:
            return out
        return np.asarray(out.tolist(), dtype=str) if out.size else out.astype(str)
    fill = 0 if value is None else (value.item() if isinstance(value, torch.Tensor) else value)
    out_t = torch.full([len(parts)] + target, fill, dtype=parts[0].dtype)
    for k, p in enumerate(parts):
        out_t[(k,) + tuple(slice(0, n) for n in p.shape)] = p
    return out_t


class _PaddedIterator(BlockIterator):
    def __init__(self, node: PaddedBatchDataset, inner: BlockIterator) -> None:
        self._node, self._in = node, inner

    def next_block(self, limit: int) -> Optional[Block]:
        size = self._node.batch_size
        blocks = pull(self._in, size)
        elements = [materialize(e) for b in blocks for e in b.elements()]
        if not elements or (len(elements) < size and self._node.drop_remainder):
            return None
        return ListBlock([self._node.pad(elements)])

    def state(self) -> dict:
        return {"in": self._in.state()}
