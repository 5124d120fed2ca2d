"""Feature specs for parsing Examples: ``tf.io.FixedLenFeature`` and friends, and `SparseTensor`.

dtypes are ``torch.float32`` (a ``float_list``), ``torch.int64`` (an
``int64_list``) or `STRING` (a ``bytes_list``; values come back as ``bytes``),
the three kinds an Example holds.

Example:
    >>> spec = {"label": FixedLenFeature([], torch.int64), "tags": VarLenFeature(STRING)}
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence

import numpy as np
import torch

from distrib.io.dtypes import STRING

__all__ = ["FixedLenFeature", "VarLenFeature", "FixedLenSequenceFeature", "SparseTensor", "feature_kind"]

_KINDS = {torch.float32: "float_list", torch.int64: "int64_list", STRING: "bytes_list"}
_NAMES = {"float_list": "float", "int64_list": "int64", "bytes_list": "string"}


def feature_kind(dtype: Any, key: str) -> str:
    """The Example field a dtype reads (``"float_list"``, ``"int64_list"``, ``"bytes_list"``)."""
    kind = _KINDS.get(dtype) if isinstance(dtype, (torch.dtype, str)) else None
    if kind is None:
        raise ValueError(f"feature {key!r}: dtype {dtype!r} is not one an Example holds: use torch.float32, "
                         f"torch.int64 or distrib.data.STRING")
    return kind


def kind_name(kind: Optional[str]) -> str:
    """TF's name of an Example field's type (``"float"``, ``"int64"``, ``"string"``)."""
    return _NAMES.get(kind or "", "none")


class FixedLenFeature(NamedTuple):
    """``tf.io.FixedLenFeature``: exactly ``prod(shape)`` values, parsed into a tensor of ``shape``.

    Without ``default_value`` the feature is required; with it, an example
    that lacks the feature gets the default (which must have ``shape``).
    """

    shape: Sequence[int]
    dtype: Any
    default_value: Any = None


class VarLenFeature(NamedTuple):
    """``tf.io.VarLenFeature``: any number of values, parsed into a `SparseTensor`."""

    dtype: Any


class FixedLenSequenceFeature(NamedTuple):
    """``tf.io.FixedLenSequenceFeature``: a multiple of ``prod(shape)`` values, parsed to ``[n, *shape]``.

    In an Example (not a SequenceExample) TF needs ``allow_missing=True``.
    ``default_value`` pads shorter examples in `parse_example` (0 or ``b""``).
    """

    shape: Sequence[int]
    dtype: Any
    allow_missing: bool = False
    default_value: Any = None


class SparseTensor(NamedTuple):
    """``tf.sparse.SparseTensor``: what a `VarLenFeature` parses to.

    ``indices`` is an int64 ``[n, rank]`` tensor, ``values`` the ``n`` values (a
    tensor, or a numpy object array of ``bytes`` for strings), ``dense_shape``
    an int64 ``[rank]`` tensor. Being a named tuple, it travels through a
    `distrib.data.Dataset` as three components.

    Example:
        >>> st = SparseTensor(torch.tensor([[0, 0], [1, 2]]), torch.tensor([5, 7]), torch.tensor([2, 3]))
        >>> st.to_dense()
        tensor([[5, 0, 0],
                [0, 0, 7]])
    """

    indices: torch.Tensor
    values: Any
    dense_shape: torch.Tensor

    def to_dense(self, default_value: Any = None) -> Any:
        """The dense tensor (``tf.sparse.to_dense``); missing entries are ``default_value`` (0 or b"")."""
        shape = tuple(int(d) for d in self.dense_shape.tolist())
        index = tuple(self.indices.t().long()) if self.indices.numel() else None
        if isinstance(self.values, np.ndarray):
            dense = np.empty(shape, dtype=object)
            dense[...] = b"" if default_value is None else default_value
            if index is not None:
                dense[tuple(i.numpy() for i in index)] = self.values
            return dense
        fill = 0 if default_value is None else default_value
        out = torch.full(shape, fill, dtype=self.values.dtype)
        if index is not None:
            out[index] = self.values
        return out
