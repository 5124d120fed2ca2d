"""Helpers for operators that hold elements or values between steps (window, scan, group_by_window, ...).

Two ways of keeping such an operator's position exact across a checkpoint:

* *replay*: `Reader` records the input's state before every element it
  reads, so an operator can save "the input as it was before my oldest
  buffered element" and re-read the buffer on restore (``window``);
* *encode*: `encode` / `decode` turn a structure of tensors into JSON
  (dtype, shape and the values, exactly: float32 survives a round trip through
  Python floats) for state that is not a replay of the input (a ``scan``
  state, ``group_by_window`` groups).

Example:
    >>> decode(encode((torch.tensor([1.5, 2.0]), {"k": torch.tensor(3, dtype=torch.int32)})))
    (tensor([1.5000, 2.0000]), {'k': tensor(3, dtype=torch.int32)})
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np
import torch

from distrib.data.blocks import Block, ListBlock, materialize
from distrib.data.dataset import Dataset
from distrib.data.stream import BlockIterator, IterContext
from distrib.data.strings import is_binary, is_string_leaf

__all__ = ["Reader", "END", "encode", "decode", "ListDataset", "DatasetSpec", "unary_check", "input_spec"]

END = object()


class Reader:
    """Reads an input iterator one materialized element at a time, keeping the state before each."""

    def __init__(self, inner: BlockIterator) -> None:
        self.inner = inner

    def read(self) -> Tuple[dict, Any]:
        """``(state before the element, element)``, or ``(state, END)`` at the end."""
        before = self.inner.state()
        block = self.inner.next_block(1)
        if block is None:
            return before, END
        return before, materialize(block.elements()[0])

    def next(self) -> Any:
        """The next element, or `END`."""
        block = self.inner.next_block(1)
        return END if block is None else materialize(block.elements()[0])


def encode(value: Any) -> Any:
    """A structure of tensors / str leaves as JSON (namedtuples come back as tuples)."""
    if isinstance(value, dict):
        return {"dict": [[k, encode(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, list) and not is_string_leaf(value):
        return {"list": [encode(v) for v in value]}
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().reshape(-1)
        return {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape),
                "data": flat.tolist()}
    if is_binary(value):
        array = np.asarray(value, dtype=object)
        return {"bytes": [v.hex() for v in array.reshape(-1).tolist()], "shape": list(array.shape),
                "scalar": isinstance(value, bytes)}
    if is_string_leaf(value):
        array = np.asarray(value)
        return {"str": array.tolist(), "shape": list(array.shape), "scalar": isinstance(value, str)}
    raise TypeError(f"cannot save a {type(value).__name__} in an iterator state")


def decode(obj: Any) -> Any:
    """Inverse of `encode`."""
    if "dict" in obj:
        return {k: decode(v) for k, v in obj["dict"]}
    if "tuple" in obj:
        return tuple(decode(v) for v in obj["tuple"])
    if "list" in obj:
        return [decode(v) for v in obj["list"]]
    if "bytes" in obj:
        items = [bytes.fromhex(v) for v in obj["bytes"]]
        if obj.get("scalar"):
            return items[0]
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out.reshape(obj["shape"])
    if "str" in obj:
        return str(obj["str"]) if obj.get("scalar") else np.asarray(obj["str"], dtype=str).reshape(obj["shape"])
    dtype = getattr(torch, str(obj["dtype"]), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"iterator state names an unknown dtype {obj['dtype']!r}")
    return torch.tensor(obj["data"], dtype=dtype).reshape(obj["shape"])


class DatasetSpec:
    """The spec of an element that is itself a dataset (``window``): ``tf.data.DatasetSpec``'s role."""

    def __init__(self, element_spec: Any) -> None:
        self.element_spec = element_spec

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, DatasetSpec) and other.element_spec == self.element_spec

    def __repr__(self) -> str:
        return f"DatasetSpec({self.element_spec!r})"


class ListDataset(Dataset):
    """The elements of a Python list, in order (a window, a group): checkpointable by position."""

    def __init__(self, items: List[Any], spec: Any = None) -> None:
        self._items, self._spec = list(items), spec

    def _cardinality(self) -> int:
        return len(self._items)

    def _static_spec(self) -> Any:
        return self._spec

    def _iterator(self, ctx: IterContext, lineage: Tuple[int, ...], state: Optional[dict]) -> BlockIterator:
        return _ListIterator(self._items, int(state["pos"]) if state else 0)


class _ListIterator(BlockIterator):
    def __init__(self, items: List[Any], pos: int) -> None:
        self._items, self._pos = items, pos

    def next_block(self, limit: int) -> Optional[Block]:
        if self._pos >= len(self._items):
            return None
        hi = min(len(self._items), self._pos + limit)
        block = ListBlock(self._items[self._pos:hi])
        self._pos = hi
        return block

    def state(self) -> dict:
        return {"pos": self._pos}


def unary_check(value: Any, where: str) -> Dataset:
    """``value`` if it is a `Dataset`, else one error line naming ``where``."""
    if not isinstance(value, Dataset):
        raise TypeError(f"{where} needs a distrib.data.Dataset, got a {type(value).__name__}")
    return value


def input_spec(node: Any) -> Any:
    """``node._input.element_spec``, computed once per node (operators ask it for every window)."""
    spec = node.__dict__.get("_input_spec_cache")
    if spec is None:
        spec = node._input.element_spec
        node.__dict__["_input_spec_cache"] = spec
    return spec
