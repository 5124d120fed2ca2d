"""Elements <-> bytes for `Dataset.cache(filename)`: JSON structure plus safetensors, no pickle.

A record holds consecutive elements. Its payload is a 4-byte length, a JSON
*tree* (the nesting: tuple, list, dict, namedtuple; the leaves' kinds) and a
safetensors blob of the leaves. When every element has the same tree and leaf
shapes the leaves are stacked (one tensor per leaf, read back as an index
block); otherwise each element keeps its own tree. Strings and bytes are
stored as their UTF-8 / raw bytes plus an int64 array of end offsets.

Example:
    >>> block = decode_record(encode_elements([(torch.tensor(1), np.str_("a"))]))
    >>> block.elements()[0]
    (tensor(1), 'a')
"""
from __future__ import annotations

import collections
import functools
import json
import struct
from typing import Any, Dict, List, Tuple

import numpy as np
import safetensors.torch
import torch

from distrib.data.blocks import Block, IndexBlock, ListBlock, TensorTable
from distrib.utils.nest import is_namedtuple

__all__ = ["encode_elements", "decode_record", "RecordError"]


class RecordError(ValueError):
    """A record payload that does not decode (the caller names the file and offset)."""


# ------------------------------------------------------------------ trees
def _tree(value: Any, leaves: List[Any]) -> Any:
    """The JSON tree of one element; its leaves appended to ``leaves``."""
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("cache(filename) stores dicts with str keys only, got keys "
                            f"{[type(k).__name__ for k in value][:3]}")
        return {"k": "dict", "keys": list(value), "c": [_tree(v, leaves) for v in value.values()]}
    if isinstance(value, tuple):
        children = [_tree(v, leaves) for v in value]
        if is_namedtuple(value):
            return {"k": "nt", "name": type(value).__name__, "fields": list(value._fields), "c": children}
        return {"k": "tuple", "c": children}
    if isinstance(value, list):
        return {"k": "list", "c": [_tree(v, leaves) for v in value]}
    leaves.append(value)
    return _leaf_kind(value)


def _leaf_kind(value: Any) -> Dict[str, Any]:
    if isinstance(value, torch.Tensor):
        return {"k": "tensor", "dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape)}
    if isinstance(value, (str, np.str_)):
        return {"k": "str"}
    if isinstance(value, (bytes, np.bytes_)):
        return {"k": "bytes"}
    if isinstance(value, np.ndarray) and value.dtype.kind in "US":
        return {"k": value.dtype.kind, "shape": list(value.shape)}
    if isinstance(value, np.ndarray) and value.dtype.kind == "O":
        items = value.reshape(-1).tolist()
        if all(isinstance(v, (bytes, np.bytes_)) for v in items):
            return {"k": "O", "shape": list(value.shape)}     # bytes records (TFRecord, parse_example)
        if all(isinstance(v, (str, np.str_)) for v in items):
            return {"k": "U", "shape": list(value.shape)}
    raise TypeError(f"cache(filename) cannot store a {type(value).__name__} element component: "
                    "components must be tensors or strings/bytes (nested in tuples, lists or dicts)")


def _build(tree: Any, leaves: List[Any]) -> Any:
    """The element of ``tree`` with its leaves taken, in order, from ``leaves`` (reversed list)."""
    kind = tree.get("k") if isinstance(tree, dict) else None
    if kind == "dict":
        keys = tree["keys"]
        children = tree["c"]
        if len(keys) != len(children) or not all(isinstance(k, str) for k in keys):
            raise RecordError("a dict node's keys do not match its children")
        return {k: _build(c, leaves) for k, c in zip(keys, children)}
    if kind in ("tuple", "list"):
        items = [_build(c, leaves) for c in tree["c"]]
        return tuple(items) if kind == "tuple" else items
    if kind == "nt":
        cls = _namedtuple(str(tree["name"]), tuple(str(f) for f in tree["fields"]))
        return cls(*(_build(c, leaves) for c in tree["c"]))
    if kind in ("tensor", "str", "bytes", "U", "S", "O"):
        if not leaves:
            raise RecordError("the record's tree names more leaves than it stores")
        return leaves.pop()
    raise RecordError(f"unknown node {str(tree)[:60]} in the record's tree")


@functools.lru_cache(maxsize=64)
def _namedtuple(name: str, fields: Tuple[str, ...]) -> Any:
    try:
        return collections.namedtuple(name, fields)
    except (TypeError, ValueError) as exc:
        raise RecordError(f"a namedtuple node is invalid: {exc}") from None


def _leaf_kinds(tree: Any, out: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    if tree.get("k") in ("dict", "tuple", "list", "nt"):
        for child in tree["c"]:
            _leaf_kinds(child, out)
    else:
        out.append(tree)
    return out


# ------------------------------------------------------------------ leaves
def _put_strings(values: List[Any], key: str, tensors: Dict[str, torch.Tensor]) -> None:
    raw = [v if isinstance(v, (bytes, np.bytes_)) else str(v).encode("utf-8") for v in values]
    tensors[key + ".data"] = torch.frombuffer(bytearray(b"".join(raw)) or bytearray(1), dtype=torch.uint8)
    tensors[key + ".ends"] = torch.tensor(np.cumsum([len(r) for r in raw], dtype=np.int64)
                                          if raw else np.zeros(0, np.int64))


def _get_strings(key: str, tensors: Dict[str, torch.Tensor], binary: bool) -> List[Any]:
    data = tensors[key + ".data"].numpy().tobytes()
    ends = tensors[key + ".ends"].tolist()
    starts = [0] + ends[:-1]
    if any(s > e for s, e in zip(starts, ends)) or (ends and ends[-1] > len(data)):
        raise RecordError(f"string offsets of leaf {key} run past its data")
    parts = [data[s:e] for s, e in zip(starts, ends)]
    return parts if binary else [p.decode("utf-8") for p in parts]


def _flat(value: Any) -> List[Any]:
    return [value] if not isinstance(value, np.ndarray) else value.reshape(-1).tolist()


def _put_leaf(values: List[Any], kind: str, key: str, tensors: Dict[str, torch.Tensor], stacked: bool) -> None:
    if kind == "tensor":
        cpu = [v.detach().cpu() for v in values]
        tensors[key] = (torch.stack(cpu) if stacked else cpu[0]).contiguous().clone()
        return
    _put_strings([item for v in values for item in _flat(v)], key, tensors)


def _get_leaf(leaf: Dict[str, Any], key: str, tensors: Dict[str, torch.Tensor], n: int) -> Any:
    """The stored leaf (``n`` rows when stacked, ``n == 0`` for one element's own leaf)."""
    kind = leaf["k"]
    if kind == "tensor":
        return tensors[key]
    items = _get_strings(key, tensors, binary=kind in ("bytes", "S", "O"))
    shape = ([n] if n else []) + [int(s) for s in leaf.get("shape", [])]
    if len(items) != int(np.prod(shape)):
        raise RecordError(f"leaf {key} holds {len(items)} strings, its shape {shape} says otherwise")
    if not shape:
        return np.str_(items[0]) if kind == "str" else items[0]
    dtype = {"str": str, "U": str, "S": bytes}.get(kind, object)
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape) if dtype is object else out.astype(dtype).reshape(shape)


# ------------------------------------------------------------------ records
def encode_elements(elements: List[Any]) -> bytes:
    """One record's payload for ``elements`` (materialized structures of tensors and strings)."""
    trees, leaves = [], []
    for element in elements:
        mine: List[Any] = []
        trees.append(_tree(element, mine))
        leaves.append(mine)
    tensors: Dict[str, torch.Tensor] = {}
    stacked = all(t == trees[0] for t in trees)
    if stacked:
        header: Dict[str, Any] = {"n": len(elements), "stacked": True, "tree": trees[0]}
        for j, leaf in enumerate(_leaf_kinds(trees[0], [])):
            _put_leaf([row[j] for row in leaves], leaf["k"], f"l{j}", tensors, True)
    else:
        header = {"n": len(elements), "stacked": False, "trees": trees}
        for i, tree in enumerate(trees):
            for j, leaf in enumerate(_leaf_kinds(tree, [])):
                _put_leaf([leaves[i][j]], leaf["k"], f"e{i}l{j}", tensors, False)
    try:
        blob = safetensors.torch.save(tensors)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise TypeError(f"cache(filename) cannot store these elements: {exc}") from None
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return struct.pack("<I", len(head)) + head + blob


def decode_record(payload: bytes) -> Block:
    """The block of elements one record holds; `RecordError` when it does not decode."""
    try:
        (n_head,) = struct.unpack_from("<I", payload, 0)
        header = json.loads(payload[4:4 + n_head].decode("utf-8"))
        tensors = safetensors.torch.load(payload[4 + n_head:])
        n = int(header["n"])
        if n < 1:
            raise RecordError("a record holds no elements")
        if header["stacked"]:
            kinds = _leaf_kinds(header["tree"], [])
            values = [_get_leaf(leaf, f"l{j}", tensors, n) for j, leaf in enumerate(kinds)]
            if any(len(v) != n for v in values):
                raise RecordError("a stacked leaf's rows differ from the record's element count")
            structure = _build(header["tree"], values[::-1])
            return IndexBlock(TensorTable(structure), np.arange(n, dtype=np.int64))
        trees = header["trees"]
        if len(trees) != n:
            raise RecordError("the record's trees differ from its element count")
        elements = []
        for i, tree in enumerate(trees):
            kinds = _leaf_kinds(tree, [])
            values = [_get_leaf(leaf, f"e{i}l{j}", tensors, 0) for j, leaf in enumerate(kinds)]
            elements.append(_build(tree, values[::-1]))
        return ListBlock(elements)
    except RecordError:
        raise
    except Exception as exc:  # garbage of any shape: JSON, safetensors, keys, types
        raise RecordError(f"{type(exc).__name__}: {str(exc)[:120]}") from None
