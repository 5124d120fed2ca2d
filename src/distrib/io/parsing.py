"""``tf.io.parse_single_example`` and ``tf.io.parse_example`` on serialized ``tf.train.Example`` s.

Results follow TF's: a `FixedLenFeature` gives a tensor of its shape (with a
leading batch dimension from `parse_example`), a `VarLenFeature` a
`SparseTensor`, a `FixedLenSequenceFeature` ``[n, *shape]`` (padded to the
batch's longest with its default). float and int64 values are torch tensors;
string values are ``bytes`` (a scalar) or numpy object arrays of ``bytes``.
Bad input (a missing required feature, a wrong count, a wrong type, bytes
that are no Example) is one ``ValueError`` line naming the feature.

Example:
    >>> parse_single_example(ex.SerializeToString(), {"y": FixedLenFeature([], torch.int64)})
    {'y': tensor(3)}
"""
from __future__ import annotations

import math
from itertools import chain
from operator import attrgetter, methodcaller
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from google.protobuf.message import DecodeError

from distrib.io.example_proto import Example, Feature
from distrib.io.features import (FixedLenFeature, FixedLenSequenceFeature, SparseTensor, VarLenFeature,
                                 feature_kind, kind_name)

__all__ = ["parse_single_example", "parse_example"]

_NUMPY = {"float_list": np.float32, "int64_list": np.int64}
_WHICH = methodcaller("WhichOneof", "kind")
_SERIALIZE = methodcaller("SerializeToString")
_ABSENT = Feature()  # read only: an absent feature looks like an empty one on the fast path


class _Spec:
    """One feature's parsing plan, checked once per call."""

    def __init__(self, key: str, spec: Any) -> None:
        if not isinstance(spec, (FixedLenFeature, VarLenFeature, FixedLenSequenceFeature)):
            raise TypeError(f"feature {key!r}: the spec must be FixedLenFeature, VarLenFeature or "
                            f"FixedLenSequenceFeature, got a {type(spec).__name__}")
        self.key, self.spec = key, spec
        self.kind = feature_kind(spec.dtype, key)
        self.var = isinstance(spec, VarLenFeature)
        self.seq = isinstance(spec, FixedLenSequenceFeature)
        self.shape: Tuple[int, ...] = () if self.var else tuple(int(d) for d in spec.shape)
        if any(d < 0 for d in self.shape):
            raise ValueError(f"feature {key!r}: shape {list(self.shape)} must be fully defined")
        self.size = math.prod(self.shape)
        if self.seq and not spec.allow_missing:
            raise ValueError(f"feature {key!r}: FixedLenSequenceFeature in an Example needs allow_missing=True "
                             f"(as in TF)")
        self.default = None if self.var or spec.default_value is None else self._default(spec.default_value)
        self.get = methodcaller("get", key, _ABSENT)
        self.list_values = attrgetter(f"{self.kind}.value")

    def _default(self, value: Any) -> np.ndarray:
        if self.kind == "bytes_list":
            flat = [v.encode("utf-8") if isinstance(v, str) else bytes(v)
                    for v in np.asarray(value, dtype=object).reshape(-1).tolist()]
            array = _object_array(flat)
        else:
            array = np.asarray(value.numpy() if isinstance(value, torch.Tensor) else value,
                               dtype=_NUMPY[self.kind]).reshape(-1)
        if self.seq:
            if array.size != 1:
                raise ValueError(f"feature {self.key!r}: FixedLenSequenceFeature's default_value pads, "
                                 f"so it must be a scalar")
            return array
        if array.size != self.size:
            raise ValueError(f"feature {self.key!r}: default_value has {array.size} values but shape "
                             f"{list(self.shape)} needs {self.size}")
        return array

    def values(self, example: Any, index: int) -> Optional[List[Any]]:
        """The feature's values in one example (None when absent), type-checked."""
        features = example.features.feature
        if self.key not in features:
            return None
        feature = features[self.key]
        kind = feature.WhichOneof("kind")
        if kind is None:  # a Feature with no list set counts as absent, as in TF
            return None
        if kind != self.kind:
            raise ValueError(f"feature {self.key!r} of example {index} holds {kind_name(kind)} values but "
                             f"its spec asks for {kind_name(self.kind)}")
        return getattr(feature, kind).value

    def fixed(self, values: Optional[List[Any]], index: int) -> Any:
        """A FixedLenFeature's flat values for one example (default filled in, count checked)."""
        if values is None:
            if self.default is None:
                raise ValueError(f"feature {self.key!r} ({kind_name(self.kind)}) is required but example "
                                 f"{index} does not have it (give FixedLenFeature a default_value to make "
                                 f"it optional)")
            return self.default
        if len(values) != self.size:
            raise ValueError(f"feature {self.key!r} of example {index} has {len(values)} "
                             f"{kind_name(self.kind)} values but shape {list(self.shape)} needs {self.size}")
        return values

    def rows(self, values: Optional[List[Any]], index: int) -> int:
        """How many ``shape``-sized rows a FixedLenSequenceFeature's values make."""
        n = 0 if values is None else len(values)
        if self.size == 0 or n % self.size:
            if n == 0:
                return 0
            raise ValueError(f"feature {self.key!r} of example {index} has {n} {kind_name(self.kind)} "
                             f"values, not a multiple of shape {list(self.shape)} ({self.size})")
        return n // self.size


def _column(plan: _Spec, maps: List[Any]) -> Any:
    """One feature of a batch without a Python call per example; None sends the batch down the checked path.

    A FixedLenFeature takes this path only when every example has exactly its
    count of values (so the right kind); other specs only when every example's
    Feature is of the spec's kind or absent/empty (both of which parse as absent).
    """
    features = list(map(plan.get, maps))
    if not (plan.var or plan.seq):
        if plan.size == 0:
            return None
        if plan.kind == "float_list":
            floats = _packed_floats(features, plan.size)
            return None if floats is None else torch.from_numpy(floats.reshape((len(features),) + plan.shape))
        values = list(map(plan.list_values, features))
        if list(map(len, values)).count(plan.size) != len(values):
            return None
        return _tensor(plan.kind, _flat(plan.kind, values), (len(values),) + plan.shape)
    if not set(map(_WHICH, features)) <= {plan.kind, None}:
        return None
    return _gather(plan, list(map(plan.list_values, features)), batched=True)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _packed_floats(features: List[Any], size: int) -> Optional[np.ndarray]:
    """``size`` floats from each Feature, read from its serialized bytes (the bits as stored); None if any differs.

    A Feature holding a FloatList of ``size`` values serializes as a fixed
    head (tag 2, length, tag 1, length ``4 * size``) and ``size``
    little-endian float32s, so the batch's Features joined are an
    ``[n, stride]`` byte matrix. Every row's head is checked, so a Feature of
    another kind or count (or an absent one, serialized empty) is caught.
    """
    head = b"\x0a" + _varint(4 * size)
    head = b"\x12" + _varint(len(head) + 4 * size) + head
    stride = len(head) + 4 * size
    blob = b"".join(map(_SERIALIZE, features))
    if len(blob) != stride * len(features):
        return None
    rows = np.frombuffer(blob, dtype=np.uint8).reshape(len(features), stride)
    if not (rows[:, :len(head)] == np.frombuffer(head, dtype=np.uint8)).all():
        return None
    return np.ascontiguousarray(rows[:, len(head):]).view("<f4").astype(np.float32, copy=False).reshape(-1)


def _object_array(items: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = list(items)
    return out


def _array(kind: str, flat: Sequence[Any]) -> np.ndarray:
    if kind == "bytes_list":
        return _object_array(flat)
    return np.asarray(flat, dtype=_NUMPY[kind])


def _tensor(kind: str, array: np.ndarray, shape: Tuple[int, ...]) -> Any:
    array = array.reshape(shape)
    if kind == "bytes_list":
        return array.item() if array.ndim == 0 else array
    return torch.from_numpy(array)


def _parse(serialized: Any, index: int) -> Any:
    if isinstance(serialized, (np.ndarray, np.generic)) and np.ndim(serialized) == 0:
        serialized = serialized.item()
    if not isinstance(serialized, (bytes, bytearray, memoryview)):
        raise TypeError(f"example {index}: a serialized Example must be bytes, got a {type(serialized).__name__}"
                        + (" (a str: keep records as bytes)" if isinstance(serialized, str) else ""))
    try:
        return Example.FromString(bytes(serialized))
    except DecodeError as exc:
        raise ValueError(f"example {index}: the bytes are not a serialized tf.train.Example ({exc})") from None


def _plans(features: Mapping[str, Any]) -> List[_Spec]:
    if not isinstance(features, Mapping) or not features:
        raise ValueError("features must be a non-empty dict of feature name -> FixedLenFeature / VarLenFeature "
                         "/ FixedLenSequenceFeature")
    return [_Spec(str(k), v) for k, v in features.items()]


def _flat(kind: str, parts: List[Any]) -> np.ndarray:
    """The values of several examples as one flat array (one conversion for the batch)."""
    return _array(kind, list(chain.from_iterable(parts)))


def _gather(plan: _Spec, per_example: List[Optional[List[Any]]], batched: bool) -> Any:
    count = len(per_example)
    if plan.var:
        present = [v for v in per_example if v]
        lengths = np.fromiter((len(v) if v else 0 for v in per_example), dtype=np.int64, count=count)
        values = _flat(plan.kind, present)
        if plan.kind != "bytes_list":
            values = torch.from_numpy(values)
        total = int(lengths.sum())
        starts = np.cumsum(lengths) - lengths
        positions = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
        if batched:
            rows = np.repeat(np.arange(count, dtype=np.int64), lengths)
            indices = np.stack([rows, positions], axis=1)
            shape = [count, int(lengths.max()) if count else 0]
        else:
            indices, shape = positions.reshape(-1, 1), [total]
        return SparseTensor(torch.from_numpy(indices), values, torch.tensor(shape, dtype=torch.int64))
    if plan.seq:
        rows = [plan.rows(v, i) for i, v in enumerate(per_example)]
        longest = max(rows, default=0)
        pad = plan.default if plan.default is not None else _array(plan.kind, [b""] if plan.kind == "bytes_list" else [0])
        parts: List[Any] = []
        for v, n in zip(per_example, rows):
            if n:
                parts.append(v)
            if n < longest:
                parts.append(np.repeat(pad, (longest - n) * plan.size).tolist())
        shape = (count, longest) + plan.shape if batched else (longest,) + plan.shape
        return _tensor(plan.kind, _flat(plan.kind, parts), shape)
    flat = _flat(plan.kind, [plan.fixed(v, i) for i, v in enumerate(per_example)])
    return _tensor(plan.kind, flat, ((count,) if batched else ()) + plan.shape)


def parse_single_example(serialized: Any, features: Mapping[str, Any], example_names: Any = None,
                         name: Optional[str] = None) -> Dict[str, Any]:
    """One serialized Example parsed by ``features`` (a dict of feature specs), as TF's function.

    Example:
        >>> spec = {"x": FixedLenFeature([2], torch.float32), "id": VarLenFeature(torch.int64)}
        >>> out = parse_single_example(record, spec)   # out["x"]: tensor of shape [2]; out["id"]: SparseTensor
    """
    plans = _plans(features)
    example = _parse(serialized, 0)
    return {p.key: _gather(p, [p.values(example, 0)], batched=False) for p in plans}


def parse_example(serialized: Any, features: Mapping[str, Any], example_names: Any = None,
                  name: Optional[str] = None) -> Dict[str, Any]:
    """A batch of serialized Examples (a list or a 1-D object array of ``bytes``) parsed by ``features``.

    Fixed-length features gain a leading batch dimension; `VarLenFeature`
    values become one `SparseTensor` of dense shape ``[batch, longest]``.
    """
    if isinstance(serialized, (bytes, bytearray)) or (isinstance(serialized, np.ndarray) and serialized.ndim != 1):
        raise ValueError("parse_example takes a 1-D batch of serialized Examples: use parse_single_example "
                         "for one")
    plans = _plans(features)
    examples = _parse_batch(list(serialized))
    maps = [e.features.feature for e in examples]
    out = {}
    for p in plans:
        column = _column(p, maps)
        out[p.key] = column if column is not None else _gather(
            p, [p.values(e, i) for i, e in enumerate(examples)], batched=True)
    return out


def _parse_batch(serialized: List[Any]) -> List[Any]:
    """Examples from a batch of bytes; any other input or a bad record goes through `_parse` to be named."""
    if all(type(s) is bytes for s in serialized):
        try:
            return list(map(Example.FromString, serialized))
        except DecodeError:
            pass
    return [_parse(s, i) for i, s in enumerate(serialized)]
