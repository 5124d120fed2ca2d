"""Bytes on the parameter-server channel: a closed, typed encoding that never runs code.

A message is ``b"DPW2"`` and one value. A value is a one-byte tag and its
body; the tags are a closed set: None, bools, integers, floats, str, bytes,
lists, tuples, dicts (keys of these same types), torch tensors and numpy
arrays. A tensor is carried raw: its dtype (by name, from a fixed table),
its shape and its bytes, whose count must equal what the dtype and shape
say. `decode` checks every length against the bytes left before it reads,
bounds the nesting depth, and refuses anything else by name, so bytes from a
stranger can cost a bounded parse and a `WireFormatError`, never an object
of their choice (nothing is unpickled, no class is looked up by name).

*References.* ``encode(value, reference=f)`` asks ``f(obj)`` about every
object that is not a plain value or container; where it answers (with a
plain value), the object travels as tag ``R`` and that answer.
``decode(data, resolve=g)`` hands each such answer to ``g`` and puts its
return value in place; without ``resolve`` a reference is refused. This is
how scheduled functions travel by registered name
(`distrib.strategies.parameter_server.registered`): the receiver, not the
bytes, decides what a name means.

Example:
    >>> import torch
    >>> decode(encode(("read", [torch.arange(3.0)], {"lr": 0.1})))
    ('read', [tensor([0., 1., 2.])], {'lr': 0.1})
    >>> try:
    ...     encode(lambda: 0)
    ... except WireFormatError as exc:
    ...     print(str(exc).split(":")[1].strip())
    cannot send a function
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from distrib.errors import DistribError

__all__ = ["encode", "decode", "is_message", "dtype_named", "WireFormatError", "MAX_DEPTH"]

Reference = Optional[Callable[[Any], Any]]

_MAGIC = b"DPW2"
MAX_DEPTH = 64
_MAX_DIMS = 32
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_DTYPES: Dict[str, torch.dtype] = {
    name: getattr(torch, name) for name in (
        "float64", "float32", "float16", "bfloat16", "complex64", "complex128", "int64", "int32",
        "int16", "int8", "uint8", "bool")}
_NUMPY_KINDS = "biufc"
_CLOSED = "None, bool, int, float, str, bytes, list, tuple, dict, tensors and numpy arrays"


class WireFormatError(DistribError, ValueError):
    """Bytes that are not a message of this channel, or a value the channel cannot carry."""


def _type_name(value: Any) -> str:
    """``"a function"``, ``"an object"``: the value's kind with its article."""
    name = "function" if callable(value) and not isinstance(value, type) else type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


# ------------------------------------------------------------------ encoding
def _encode(value: Any, out: List[bytes], depth: int, reference: Reference = None) -> None:
    if depth > MAX_DEPTH:
        raise WireFormatError(f"parameter-server message: nested deeper than {MAX_DEPTH} levels")
    if value is None:
        out.append(b"N")
    elif value is True or value is False:
        out.append(b"T" if value else b"F")
    elif isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            out += [b"i", _I64.pack(value)]
        else:
            raw = str(value).encode()
            out += [b"I", _U32.pack(len(raw)), raw]
    elif isinstance(value, float):
        out += [b"f", _F64.pack(value)]
    elif isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
        out += [b"s", _U64.pack(len(raw)), raw]
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        out += [b"b", _U64.pack(len(raw)), raw]
    elif isinstance(value, (list, tuple)):
        out += [b"l" if isinstance(value, list) else b"t", _U32.pack(len(value))]
        for item in value:
            _encode(item, out, depth + 1, reference)
    elif isinstance(value, dict):
        out += [b"d", _U32.pack(len(value))]
        for key, item in value.items():
            _encode(key, out, depth + 1, reference)
            _encode(item, out, depth + 1, reference)
    elif reference is not None and (ref := reference(value)) is not None:
        out.append(b"R")
        _encode(ref, out, depth + 1)
    elif isinstance(value, torch.Tensor):
        _encode_tensor(value, out)
    elif isinstance(value, np.ndarray) and value.dtype.kind in _NUMPY_KINDS:
        raw = np.ascontiguousarray(value).tobytes()
        dtype = value.dtype.str.encode()
        out += [b"A", _U32.pack(len(dtype)), dtype, _U32.pack(value.ndim),
                *[_U64.pack(n) for n in value.shape], _U64.pack(len(raw)), raw]
    elif isinstance(value, (np.generic,)) and value.dtype.kind in _NUMPY_KINDS:
        _encode(value.item(), out, depth)
    else:
        raise WireFormatError(f"parameter-server message: cannot send {_type_name(value)}: the channel "
                              f"carries {_CLOSED}")


def _encode_tensor(tensor: torch.Tensor, out: List[bytes]) -> None:
    name = str(tensor.dtype).rsplit(".", 1)[-1]
    if name not in _DTYPES or tensor.layout != torch.strided or tensor.is_quantized:
        raise WireFormatError(f"parameter-server message: cannot send a {tensor.dtype} {tensor.layout} "
                              f"tensor (dense tensors of {', '.join(_DTYPES)} only)")
    flat = tensor.detach().resolve_conj().resolve_neg().to("cpu").contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    out += [b"X", name.encode().ljust(16), b"G" if tensor.requires_grad else b"-",
            _U32.pack(tensor.dim()), *[_U64.pack(n) for n in tensor.shape], _U64.pack(len(raw)), raw]


def encode(value: Any, reference: Reference = None) -> bytes:
    """``value`` as one message. Raises `WireFormatError` naming a type the channel cannot carry.

    ``reference(obj)``, if given, may answer a plain value for an object to
    send in its place (see the module's docstring)."""
    out: List[bytes] = [_MAGIC]
    _encode(value, out, 0, reference)
    return b"".join(out)


def is_message(data: bytes) -> bool:
    """Whether ``data`` starts like a message of this encoding (anything else is not decoded here)."""
    return bytes(data[:len(_MAGIC)]) == _MAGIC


def dtype_named(name: Any) -> torch.dtype:
    """The tensor dtype called ``name`` (``"float32"``), among those the channel carries."""
    dtype = _DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise WireFormatError(f"parameter-server message: bad tensor dtype {name!r}")
    return dtype


# ------------------------------------------------------------------ decoding
class _Reader:
    def __init__(self, data: bytes) -> None:
        self.view = memoryview(data)
        self.pos = len(_MAGIC)

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.view):
            raise WireFormatError(f"parameter-server message: truncated (wants {n} bytes at offset "
                                  f"{self.pos} of {len(self.view)})")
        chunk = self.view[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: struct.Struct) -> Any:
        return fmt.unpack(self.take(fmt.size))[0]

    def count(self, item_bytes: int) -> int:
        n = self.unpack(_U32)
        if n * item_bytes > len(self.view) - self.pos:  # each item needs at least its tag
            raise WireFormatError(f"parameter-server message: truncated ({n} items announced)")
        return n

    def shape(self) -> Tuple[int, ...]:
        dims = self.unpack(_U32)
        if dims > _MAX_DIMS:
            raise WireFormatError(f"parameter-server message: a tensor with {dims} dimensions")
        return tuple(self.unpack(_U64) for _ in range(dims))


def _sized(reader: _Reader, shape: Tuple[int, ...], itemsize: int) -> memoryview:
    count = 1
    for n in shape:
        count *= n
    size = reader.unpack(_U64)
    if size != count * itemsize:
        raise WireFormatError(f"parameter-server message: a tensor of shape {shape} announces {size} "
                              f"bytes, not {count * itemsize}")
    return reader.take(size)


def _decode(reader: _Reader, depth: int, resolve: Reference = None) -> Any:
    if depth > MAX_DEPTH:
        raise WireFormatError(f"parameter-server message: nested deeper than {MAX_DEPTH} levels")
    tag = bytes(reader.take(1))
    if tag == b"N":
        return None
    if tag in (b"T", b"F"):
        return tag == b"T"
    if tag == b"i":
        return reader.unpack(_I64)
    if tag == b"I":
        raw = bytes(reader.take(min(reader.unpack(_U32), 4096)))
        try:
            return int(raw)
        except ValueError:
            raise WireFormatError("parameter-server message: a malformed integer") from None
    if tag == b"f":
        return reader.unpack(_F64)
    if tag == b"s":
        try:
            return bytes(reader.take(reader.unpack(_U64))).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise WireFormatError("parameter-server message: a string that is not UTF-8") from None
    if tag == b"b":
        return bytes(reader.take(reader.unpack(_U64)))
    if tag in (b"l", b"t"):
        items = [_decode(reader, depth + 1, resolve) for _ in range(reader.count(1))]
        return items if tag == b"l" else tuple(items)
    if tag == b"d":
        out: Dict[Any, Any] = {}
        for _ in range(reader.count(2)):
            key = _decode(reader, depth + 1)
            try:
                out[key] = _decode(reader, depth + 1, resolve)
            except TypeError:
                raise WireFormatError("parameter-server message: an unhashable dict key") from None
        return out
    if tag == b"X":
        return _decode_tensor(reader)
    if tag == b"R":
        if resolve is None:
            raise WireFormatError("parameter-server message: a reference where none is expected")
        return resolve(_decode(reader, depth + 1))
    if tag == b"A":
        dtype_text = bytes(reader.take(min(reader.unpack(_U32), 16))).decode("ascii", "replace")
        try:
            dtype = np.dtype(dtype_text)
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind not in _NUMPY_KINDS or dtype.str != dtype_text:
            raise WireFormatError(f"parameter-server message: bad array dtype {dtype_text!r}")
        shape = reader.shape()
        return np.frombuffer(bytes(_sized(reader, shape, dtype.itemsize)), dtype=dtype).reshape(shape).copy()
    raise WireFormatError(f"parameter-server message: unknown value tag {tag!r}")


def _decode_tensor(reader: _Reader) -> torch.Tensor:
    name = bytes(reader.take(16)).decode("ascii", "replace").strip()
    dtype = _DTYPES.get(name)
    if dtype is None:
        raise WireFormatError(f"parameter-server message: bad tensor dtype {name!r}")
    grad = bytes(reader.take(1)) == b"G"
    shape = reader.shape()
    raw = _sized(reader, shape, torch.empty((), dtype=dtype).element_size())
    if not len(raw):
        tensor = torch.empty(shape, dtype=dtype)
    else:
        tensor = torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
    return tensor.requires_grad_(True) if grad and (dtype.is_floating_point or dtype.is_complex) else tensor


def decode(data: bytes, resolve: Reference = None) -> Any:
    """The value of a message made by `encode`; `WireFormatError` for anything else.

    ``resolve(answer)`` gives the object for each reference (refused without it)."""
    if len(data) < len(_MAGIC) or not is_message(data):
        raise WireFormatError("parameter-server message: not a distrib message (bad magic)")
    reader = _Reader(data)
    value = _decode(reader, 0, resolve)
    if reader.pos != len(reader.view):
        raise WireFormatError("parameter-server message: trailing bytes after the value")
    return value
