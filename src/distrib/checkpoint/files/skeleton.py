"""The safe format's JSON skeleton: a nested state's structure, encoded and decoded.

`SkeletonEncoder` turns a state (dicts, lists, tuples, tensors, numpy arrays
and scalars, plain leaves) into a JSON-able skeleton and the tensors it names;
`decode_skeleton` rebuilds the state from them and refuses, with one line,
anything the encoder would not have written (no code runs on load).
`distrib.checkpoint.files.format` puts both in one safetensors file.
"""
from __future__ import annotations

import collections
import math
from typing import Any, Dict

import numpy as np
import torch

from distrib.checkpoint.errors import UnsafeFileError
from distrib.utils.nest import is_namedtuple

__all__ = ["SkeletonEncoder", "decode_skeleton", "check_tensor", "check_array", "check_key", "unsupported", "short",
           "state_dict_metadata"]


def state_dict_metadata(value: dict) -> Any:
    """The ``_metadata`` a torch ``state_dict()`` carries (versions per submodule), or None for a
    plain dict; saved beside the dict's items so a restored state dict loads as the original did."""
    return getattr(value, "_metadata", None)  # torch state dicts carry _metadata, plain dicts not


def check_tensor(path: str, tensor: torch.Tensor) -> None:
    if tensor.is_sparse or tensor.layout != torch.strided:
        raise TypeError(f"cannot save {path}: only dense (strided) tensors are supported, got {tensor.layout}")


def check_array(path: str, array: np.ndarray) -> None:
    if array.dtype == object:
        raise TypeError(f"cannot save {path}: numpy arrays of dtype object are not supported")


def check_key(path: str, key: Any) -> None:
    if key is not None and not isinstance(key, (str, int, float, bool)):
        raise TypeError(f"cannot save {path}: dict key {key!r} of type {type(key).__qualname__} is not supported")


def unsupported(path: str, value: Any) -> TypeError:
    return TypeError(f"cannot save {path}: type {type(value).__qualname__} is not supported "
                     "(use tensors, numpy arrays, int, float, bool, str, None, list, tuple, dict)")


class SkeletonEncoder:
    """Turns a nested state into (JSON skeleton, {name: tensor})."""

    def __init__(self, to_cpu: bool = True) -> None:
        self.tensors: Dict[str, torch.Tensor] = {}
        self._storages: set = set()
        self._to_cpu = to_cpu

    def encode(self, value: Any, path: str) -> Any:
        if isinstance(value, np.generic):  # before float: np.float64 subclasses float
            return {"npscalar": value.dtype.str, "value": self.encode(value.item(), path)}
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, torch.Tensor):
            return {"tensor": self._add(path, value)}
        if isinstance(value, np.ndarray):
            check_array(path, value)
            return {"ndarray": self._add(path, torch.from_numpy(np.ascontiguousarray(value)))}
        if isinstance(value, dict):
            return self._encode_dict(value, path)
        if isinstance(value, tuple) and not is_namedtuple(value):
            return {"tuple": [self.encode(v, f"{path}/{i}") for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [self.encode(v, f"{path}/{i}") for i, v in enumerate(value)]
        raise unsupported(path, value)

    def _encode_dict(self, value: dict, path: str) -> Dict[str, Any]:
        items = []
        for k, v in value.items():
            check_key(path, k)
            items.append([self.encode(k, path), self.encode(v, f"{path}/{k}")])
        node: Dict[str, Any] = {"odict" if isinstance(value, collections.OrderedDict) else "dict": items}
        meta = state_dict_metadata(value)
        if meta is not None:
            node["metadata"] = self.encode(dict(meta), f"{path}/_metadata")
        return node

    def _add(self, path: str, tensor: torch.Tensor) -> str:
        check_tensor(path, tensor)
        t = tensor.detach()
        if self._to_cpu:
            t = t.cpu().contiguous()
            if t.numel() and t.untyped_storage().data_ptr() in self._storages:
                t = t.clone()  # safetensors refuses tensors that share memory
            if t.numel():
                self._storages.add(t.untyped_storage().data_ptr())
        name, n = path, 1
        while name in self.tensors:
            n += 1
            name = f"{path}#{n}"
        self.tensors[name] = t
        return name


_MAX_DEPTH = 100  # a real state nests a handful of levels
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_SCALAR_KINDS = "biufc"


def decode_skeleton(node: Any, tensors: Dict[str, torch.Tensor], where: str, depth: int = 0) -> Any:
    """The value a skeleton node describes; anything else than what `SkeletonEncoder` writes is refused."""
    if depth > _MAX_DEPTH:
        raise UnsafeFileError(f"{where}: state skeleton nested deeper than {_MAX_DEPTH} levels")
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [decode_skeleton(v, tensors, where, depth + 1) for v in node]
    if not isinstance(node, dict) or len(node) == 0:
        raise UnsafeFileError(f"{where}: malformed state skeleton node {short(node)}")
    try:
        return _decode_tagged(node, tensors, where, depth)
    except UnsafeFileError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        raise UnsafeFileError(f"{where}: malformed state skeleton node {short(node)} "
                              f"({type(exc).__name__}: {short(exc)})") from None


def _decode_tagged(node: Dict[str, Any], tensors: Dict[str, torch.Tensor], where: str, depth: int) -> Any:
    if "tensor" in node:
        return _tensor(node["tensor"], tensors, where)
    if "ndarray" in node:
        return _tensor(node["ndarray"], tensors, where).numpy()
    if "float" in node:
        if node["float"] not in _NON_FINITE:
            raise ValueError(f"not a non-finite float tag: {short(node['float'])}")
        return _NON_FINITE[node["float"]]
    if "npscalar" in node:
        dtype = np.dtype(node["npscalar"]) if isinstance(node["npscalar"], str) else None
        if dtype is None or dtype.kind not in _SCALAR_KINDS and dtype.kind != "?":
            raise ValueError(f"not a numeric numpy scalar type: {short(node['npscalar'])}")
        value = decode_skeleton(node["value"], tensors, where, depth + 1)
        if not isinstance(value, (bool, int, float)):
            raise ValueError("numpy scalar value is not a number")
        return dtype.type(value)
    if "tuple" in node:
        if not isinstance(node["tuple"], list):
            raise ValueError("tuple items are not a list")
        return tuple(decode_skeleton(v, tensors, where, depth + 1) for v in node["tuple"])
    if "dict" in node or "odict" in node:
        kind = collections.OrderedDict if "odict" in node else dict
        items = node["odict"] if "odict" in node else node["dict"]
        if not isinstance(items, list) or not all(isinstance(kv, list) and len(kv) == 2 for kv in items):
            raise ValueError("dict items are not [key, value] pairs")
        out = kind()
        for k, v in items:
            key = decode_skeleton(k, tensors, where, depth + 1)
            if key is not None and not isinstance(key, (str, int, float, bool)):
                raise ValueError(f"dict key of type {type(key).__name__}")
            out[key] = decode_skeleton(v, tensors, where, depth + 1)
        if "metadata" in node:
            meta = decode_skeleton(node["metadata"], tensors, where, depth + 1)
            if not isinstance(meta, dict):
                raise ValueError("dict metadata is not a dict")
            out._metadata = meta  # type: ignore[attr-defined]
        return out
    raise UnsafeFileError(f"{where}: unknown state skeleton node {short(sorted(map(str, node)))}")


def short(value: Any) -> str:
    text = repr(value) if not isinstance(value, BaseException) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _tensor(name: Any, tensors: Dict[str, torch.Tensor], where: str) -> torch.Tensor:
    try:
        return tensors[name]
    except (KeyError, TypeError):
        raise UnsafeFileError(f"{where}: skeleton refers to tensor {name!r} that the file does not hold") from None
