"""Bytes on the parameter-server channel: Python structures with tensors carried raw.

`encode` pickles a structure but takes every dense CPU tensor out of the
pickle: each becomes a reference ``(dtype, shape, requires_grad)`` and its
bytes are appended after the pickle, so tensor data is copied once and never
passes through pickle. `decode` reverses it. The channel calls `decode` only
on bytes whose job token (or reply seal) it has checked
(`distrib.strategies.parameter_server.auth`): pickle runs code, so bytes from an
unauthenticated peer are never decoded.

Layout: ``b"DPW1" | pickle length (8 bytes, big-endian) | pickle | tensor bytes...``

Example:
    >>> import torch
    >>> decode(encode(("read", [torch.arange(3.0)])))
    ('read', [tensor([0., 1., 2.])])
"""
from __future__ import annotations

import io
import pickle
from typing import Any, List, Optional, Tuple

import torch

from distrib.errors import DistribError

__all__ = ["encode", "decode", "WireFormatError"]

_MAGIC = b"DPW1"
_HEAD = len(_MAGIC) + 8


class WireFormatError(DistribError, ValueError):
    """Bytes that are not a message of this channel (or are truncated)."""


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.buffers: List[memoryview] = []

    def persistent_id(self, obj: Any) -> Optional[Tuple[Any, ...]]:
        if (type(obj) is not torch.Tensor or obj.device.type != "cpu" or obj.layout != torch.strided
                or obj.is_quantized or obj.is_conj() or obj.is_neg()):
            return None
        flat = obj.detach().contiguous().reshape(-1)
        self.buffers.append(memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b""))
        return ("t", str(obj.dtype).rsplit(".", 1)[-1], tuple(obj.shape), bool(obj.requires_grad))


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, tail: bytearray) -> None:
        super().__init__(file)
        self._tail = tail
        self._offset = 0

    def persistent_load(self, pid: Any) -> torch.Tensor:
        try:
            kind, dtype_name, shape, requires_grad = pid
            dtype = getattr(torch, dtype_name)
            if kind != "t" or not isinstance(dtype, torch.dtype):
                raise ValueError(dtype_name)
        except (TypeError, ValueError, AttributeError):
            raise WireFormatError(f"parameter-server message: bad tensor reference {pid!r}") from None
        count = 1
        for n in shape:
            count *= int(n)
        size = count * torch.empty((), dtype=dtype).element_size()
        if self._offset + size > len(self._tail):
            raise WireFormatError("parameter-server message: truncated tensor data")
        if count == 0:
            tensor = torch.empty(shape, dtype=dtype)
        else:
            tensor = torch.frombuffer(self._tail, dtype=dtype, count=count, offset=self._offset).reshape(shape)
        self._offset += size
        return tensor.requires_grad_(True) if requires_grad else tensor


def encode(value: Any) -> bytes:
    """``value`` as one message (tensors raw, the rest pickled)."""
    file = io.BytesIO()
    pickler = _Pickler(file)
    pickler.dump(value)
    body = file.getvalue()
    return b"".join([_MAGIC, len(body).to_bytes(8, "big"), body, *pickler.buffers])


def decode(data: bytes) -> Any:
    """The value of a message made by `encode`. Only for authenticated bytes (it unpickles)."""
    if len(data) < _HEAD or data[:len(_MAGIC)] != _MAGIC:
        raise WireFormatError("parameter-server message: not a distrib message (bad magic)")
    n = int.from_bytes(data[len(_MAGIC):_HEAD], "big")
    if _HEAD + n > len(data):
        raise WireFormatError("parameter-server message: truncated")
    tail = bytearray(data[_HEAD + n:])
    return _Unpickler(io.BytesIO(data[_HEAD:_HEAD + n]), tail).load()
