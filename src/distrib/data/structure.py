"""Nested structures of tensors: conversion, specs, stacking and slicing.

A dataset element is a tensor, or a tuple / namedtuple / dict nesting tensors
(tf.data's rule). numpy arrays and Python numbers become tensors; numpy keeps
its dtype (float64 stays float64), Python floats become float32 and ints int32
(int64 when a value does not fit), as in tf.data.
A list is a tensor when it holds numbers (``[1, 2]``) and a structure when it
holds tensors or arrays (``[x_batch, y_batch]``, what a torch ``DataLoader``
yields), so both TensorFlow and PyTorch inputs read naturally.

Example:
    >>> to_structure((np.zeros(2, np.float64), 3))
    (tensor([0., 0.], dtype=torch.float64), tensor(3, dtype=torch.int32))
    >>> spec_of({"x": torch.zeros(4, 2)})
    {'x': TensorSpec(shape=(4, 2), dtype=torch.float32)}
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from distrib.data.batch_buffers import stacked
from distrib.data.strings import STRING, cat_strings, is_string_leaf, stack_strings, to_string_leaf

__all__ = [
    "TensorSpec", "is_structure", "map_leaves", "leaves", "to_tensor", "to_structure",
    "spec_of", "batched_spec", "unbatched_spec", "stack_structures", "cat_structures",
    "leading_size", "slice_structure", "empty_from_spec", "call_unpacked", "loosen_batch",
    "spec_to_json", "spec_from_json",
]


@dataclass(frozen=True)
class TensorSpec:
    """Shape (``None`` for unknown dimensions) and dtype of one tensor of an element."""

    shape: Tuple[Optional[int], ...]
    dtype: torch.dtype

    def is_compatible_with(self, value: Any) -> bool:
        """True when ``value`` has this dtype and rank, and every known dimension matches."""
        if self.dtype == STRING or not isinstance(value, torch.Tensor):
            shape = np.shape(value)
            return (self.dtype == STRING and is_string_leaf(value) and len(shape) == len(self.shape)
                    and all(s is None or s == v for s, v in zip(self.shape, shape)))
        return (value.dtype == self.dtype and value.dim() == len(self.shape)
                and all(s is None or s == v for s, v in zip(self.shape, value.shape)))


def is_structure(value: Any) -> bool:
    """True for tuples, namedtuples, dicts, and lists that hold tensors, arrays or structures."""
    if isinstance(value, (tuple, dict)):
        return True
    if isinstance(value, list):
        return any(isinstance(v, (torch.Tensor, np.ndarray, tuple, dict, TensorSpec)) for v in value)
    return False


def map_leaves(fn: Callable[[Any], Any], value: Any) -> Any:
    """Apply ``fn`` to every leaf, keeping tuples, namedtuples, dicts and structural lists."""
    if isinstance(value, dict):
        return type(value)((k, map_leaves(fn, v)) for k, v in value.items())
    if isinstance(value, tuple):
        if hasattr(value, "_fields"):
            return type(value)(*(map_leaves(fn, v) for v in value))
        return tuple(map_leaves(fn, v) for v in value)
    if isinstance(value, list) and is_structure(value):
        return [map_leaves(fn, v) for v in value]
    return fn(value)


def leaves(value: Any) -> List[Any]:
    """The leaves of ``value`` in a fixed order."""
    out: List[Any] = []
    map_leaves(out.append, value)
    return out


def _zip_map(fn: Callable[[List[Any]], Any], values: Sequence[Any]) -> Any:
    """Apply ``fn`` to the list of corresponding leaves of several same-shaped structures."""
    first = values[0]
    if isinstance(first, dict):
        return type(first)((k, _zip_map(fn, [v[k] for v in values])) for k in first)
    if isinstance(first, tuple):
        parts = [_zip_map(fn, [v[i] for v in values]) for i in range(len(first))]
        return type(first)(*parts) if hasattr(first, "_fields") else tuple(parts)
    if isinstance(first, list) and is_structure(first):
        return [_zip_map(fn, [v[i] for v in values]) for i in range(len(first))]
    return fn(list(values))


def to_tensor(value: Any) -> torch.Tensor:
    """One leaf as a tensor; numpy keeps its dtype and shares memory where it can.

    Strings (str, bytes, lists and numpy arrays of them) stay strings: see `distrib.data.strings`.
    """
    if isinstance(value, torch.Tensor):
        return value
    if is_string_leaf(value):
        return to_string_leaf(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "OUSV":
            raise TypeError(f"cannot make a tensor from a numpy array of dtype {value.dtype}: "
                            "torch tensors hold numbers only (encode strings as integer ids)")
        if not value.flags.writeable:
            value = value.copy()
        return torch.from_numpy(value)
    if isinstance(value, np.generic):
        return torch.from_numpy(np.asarray(value))
    if isinstance(value, (bool, numbers.Number)) or isinstance(value, list):
        try:
            tensor = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(f"cannot make a tensor from {_short(value)}: {exc}") from None
        if tensor.dtype == torch.int64 and _python_ints(value) and _fits_int32(tensor):
            return tensor.to(torch.int32)  # tf.data's rule: Python ints are int32 when they fit
        return tensor
    raise TypeError(f"cannot make a tensor from a {type(value).__name__} ({_short(value)}): "
                    "elements must be tensors, numpy arrays or numbers, nested in tuples or dicts")


def to_structure(value: Any) -> Any:
    """Convert every leaf of an element to a tensor."""
    if isinstance(value, torch.Tensor):
        return value
    return map_leaves(to_tensor, value)


def spec_of(value: Any) -> Any:
    """The `TensorSpec` structure of an element of tensors."""
    def one(t: Any) -> TensorSpec:
        if isinstance(t, torch.Tensor):
            return TensorSpec(tuple(t.shape), t.dtype)
        return TensorSpec(tuple(np.shape(t)), STRING)
    return map_leaves(one, value)


def batched_spec(spec: Any, batch: Optional[int]) -> Any:
    """``spec`` with a leading batch dimension (``None`` when batches may be partial)."""
    return map_leaves(lambda s: TensorSpec((batch,) + s.shape, s.dtype), spec)


def unbatched_spec(spec: Any) -> Any:
    """``spec`` without its leading dimension."""
    return map_leaves(lambda s: TensorSpec(s.shape[1:], s.dtype), spec)


def loosen_batch(spec: Any) -> Any:
    """``spec`` with an unknown leading dimension."""
    return map_leaves(lambda s: TensorSpec((None,) + s.shape[1:], s.dtype), spec)


def stack_structures(elements: Sequence[Any]) -> Any:
    """Stack same-shaped elements into one batch (new leading dimension)."""
    def stack(parts: List[Any]) -> Any:
        try:
            if not isinstance(parts[0], torch.Tensor):
                return stack_strings(parts)
            return stacked(parts)
        except (RuntimeError, ValueError):
            shapes = sorted({tuple(np.shape(p)) for p in parts})
            raise ValueError(f"cannot batch elements of different shapes {shapes[:3]}: "
                             "make them equal with map() before batch()") from None
    try:
        return _zip_map(stack, list(elements))
    except (KeyError, IndexError, TypeError):
        raise ValueError("cannot batch elements of different structures: every element of a "
                         "dataset must have the same tuple/dict layout") from None


def cat_structures(batches: Sequence[Any]) -> Any:
    """Concatenate batches along their leading dimension."""
    if len(batches) == 1:
        return batches[0]

    def cat(parts: List[Any]) -> Any:
        try:
            if not isinstance(parts[0], torch.Tensor):
                return cat_strings(parts)
            return torch.cat(parts)
        except (RuntimeError, ValueError):
            shapes = sorted({tuple(np.shape(p)[1:]) for p in parts})
            raise ValueError(f"cannot batch elements of different shapes {shapes[:3]}: "
                             "make them equal with map() before batch()") from None
    return _zip_map(cat, list(batches))


def leading_size(value: Any, what: str = "element") -> int:
    """The common leading dimension of every tensor in ``value``; an error when there is none."""
    sizes = set()
    for t in leaves(value):
        if not isinstance(t, (torch.Tensor, np.ndarray)) or t.ndim == 0:
            raise ValueError(f"{what} has a scalar component, so it has no batch dimension to split: "
                             "batch the dataset with the global batch size first (.batch(global_batch))")
        sizes.add(int(t.shape[0]))
    if len(sizes) != 1:
        raise ValueError(f"{what} components have different leading sizes {sorted(sizes)}: "
                         "every component of a batch needs the same batch dimension")
    return sizes.pop()


def slice_structure(value: Any, lo: int, hi: int) -> Any:
    """Rows ``lo:hi`` of every tensor (views, no copy)."""
    if isinstance(value, torch.Tensor):
        return value[lo:hi]
    return map_leaves(lambda t: t[lo:hi], value)


def empty_from_spec(spec: Any) -> Any:
    """A batch of zero examples matching a (batched) spec; unknown inner dimensions become 0."""
    def empty(s: TensorSpec) -> Any:
        shape = (0,) + tuple(d or 0 for d in s.shape[1:])
        return np.empty(shape, dtype="<U1") if s.dtype == STRING else torch.empty(shape, dtype=s.dtype)
    return map_leaves(empty, spec)


def call_unpacked(fn: Callable, element: Any) -> Any:
    """Call a user function tf.data-style: tuple components become positional arguments."""
    if isinstance(element, tuple) and not hasattr(element, "_fields"):
        return fn(*element)
    return fn(element)


def spec_to_json(spec: Any) -> Any:
    """A JSON-able description of a spec (used to agree on empty batches across workers)."""
    if isinstance(spec, TensorSpec):
        return {"shape": list(spec.shape), "dtype": str(spec.dtype).replace("torch.", "")}
    if isinstance(spec, dict):
        return {"dict": {k: spec_to_json(v) for k, v in spec.items()}}
    if isinstance(spec, (tuple, list)):
        return {"seq": [spec_to_json(v) for v in spec], "list": isinstance(spec, list)}
    raise TypeError(f"not a spec: {spec!r}")


def spec_from_json(obj: Any) -> Any:
    """Inverse of `spec_to_json` (namedtuples come back as tuples)."""
    if "shape" in obj:
        dtype = STRING if obj["dtype"] == STRING else getattr(torch, obj["dtype"])
        return TensorSpec(tuple(obj["shape"]), dtype)
    if "dict" in obj:
        return {k: spec_from_json(v) for k, v in obj["dict"].items()}
    seq = [spec_from_json(v) for v in obj["seq"]]
    return seq if obj["list"] else tuple(seq)


def _python_ints(value: Any) -> bool:
    if isinstance(value, list):
        return all(_python_ints(v) for v in value)
    return type(value) is int


def _fits_int32(tensor: torch.Tensor) -> bool:
    return tensor.numel() == 0 or (int(tensor.min()) >= -2**31 and int(tensor.max()) < 2**31)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
