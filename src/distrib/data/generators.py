"""`Dataset.from_generator`'s signature arguments, as tf.data takes them.

``output_signature`` is a structure of `TensorSpec`; the older
``output_types`` (+ ``output_shapes``) pair is accepted too and turned into
one. A type is a torch dtype, a numpy dtype, a dtype name (``"int64"``,
``"float32"``) or ``"string"``; a shape is a list of ints / None.

Example:
    >>> signature_from_types((torch.int64, "string"), ([None], []))
    (TensorSpec(shape=(None,), dtype=torch.int64), TensorSpec(shape=(), dtype='string'))
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from distrib.data.strings import STRING
from distrib.data.structure import TensorSpec

__all__ = ["signature_from_types", "as_dtype"]


def as_dtype(value: Any) -> Any:
    """A torch dtype (or `STRING`) for a torch/numpy dtype, a Python type or a dtype name."""
    if isinstance(value, torch.dtype):
        return value
    if value in (str, bytes) or (isinstance(value, str) and value in (STRING, "str", "tf.string")):
        return STRING
    name = value if isinstance(value, str) else getattr(value, "name", None)  # duck-typed dtype spec (a torch/numpy dtype or a user type)
    if name is None:
        try:
            name = np.dtype(value).name
        except TypeError:
            name = None
    name = (name or "").replace("tf.", "").replace("torch.", "")
    dtype = getattr(torch, name, None) if name else None
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"from_generator: unknown output type {value!r}: use a torch dtype, a numpy dtype, "
                        f"a name such as 'int64', or 'string'")
    return dtype


def signature_from_types(types: Any, shapes: Optional[Any]) -> Any:
    """The `TensorSpec` structure for tf.data's ``output_types`` / ``output_shapes``."""
    if isinstance(types, dict):
        return {k: signature_from_types(types[k], None if shapes is None else shapes[k]) for k in types}
    if isinstance(types, (tuple, list)):
        if shapes is not None and (not isinstance(shapes, (tuple, list)) or len(shapes) != len(types)):
            raise ValueError("from_generator: output_shapes must have the structure of output_types")
        return tuple(signature_from_types(t, None if shapes is None else shapes[i])
                     for i, t in enumerate(types))
    dims: Any = None if shapes is None else tuple(None if d is None or int(d) < 0 else int(d)
                                                  for d in shapes)
    return TensorSpec(dims, as_dtype(types)) if dims is not None else _AnyShapeSpec(as_dtype(types))


class _AnyShapeSpec(TensorSpec):
    """A spec that fixes the dtype only (``output_types`` without ``output_shapes``)."""

    def __init__(self, dtype: Any) -> None:
        super().__init__((), dtype)
        object.__setattr__(self, "shape", None)

    def is_compatible_with(self, value: Any) -> bool:
        return True
