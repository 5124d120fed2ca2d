"""The safetensors file layout, written and parsed a tensor at a time.

A safetensors file is ``<8-byte little-endian header length N><N bytes of
JSON header><data>``; the header maps each tensor's name to its ``dtype``,
``shape`` and ``data_offsets`` (``[begin, end)`` within the data, which the
tensors tile exactly, in offset order), plus an optional ``__metadata__``
object of strings. distrib writes and reads this layout itself, rather than
through ``safetensors.torch.save``/``load`` on one ``bytes`` object, so that
a multi-gigabyte state never exists twice in memory:

* `write_tensors` sends each tensor's own memory to the file (a CPU copy of
  one tensor at a time for a GPU or non-contiguous one);
* `parse_header` checks everything the header claims -- against the file's
  real size -- before a byte of data is read or allocated, and
  `TensorEntry.read_into` fills a tensor straight from the file.

The files are plain safetensors: ``safetensors.torch.load_file`` reads what
`write_tensors` writes, and `parse_header` reads what ``safetensors.torch.save``
writes (checkpoints of earlier distrib versions included).

Example:
    >>> with open("/tmp/t.safetensors", "wb") as f:
    ...     write_tensors(f, {"w": torch.ones(2, 3)}, {"note": "hi"})
    >>> with open("/tmp/t.safetensors", "rb") as f:
    ...     header = read_header(f, os.path.getsize("/tmp/t.safetensors"), "t")
    ...     w = torch.empty(header.entries["w"].shape)
    ...     header.entries["w"].read_into(f, w, header.data_start)
    >>> header.metadata, w.sum().item()
    ({'note': 'hi'}, 6.0)
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch

from distrib.checkpoint.errors import UnsafeFileError

__all__ = ["DTYPES", "MAX_HEADER_BYTES", "CHUNK_BYTES", "TensorEntry", "Header", "byte_view", "write_tensors",
           "read_header", "parse_header", "check_leading_bytes"]

#: The format's dtype names and the torch dtypes they stand for.
DTYPES: Dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "C64": torch.complex64, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64,
}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
_ITEMSIZE = {dtype: torch.empty((), dtype=dtype).element_size() for dtype in DTYPES.values()}
#: safetensors' own limit on the JSON header.
MAX_HEADER_BYTES = 100 * 1024 * 1024
#: What one read or write moves at most (and what hashing a file keeps in memory).
CHUNK_BYTES = 8 * 1024 * 1024
_ENTRY_KEYS = {"dtype", "shape", "data_offsets"}


def byte_view(tensor: torch.Tensor) -> np.ndarray:
    """The bytes of a contiguous CPU tensor as a uint8 array sharing its memory (no copy)."""
    flat = tensor.detach().reshape(-1)
    return flat.view(torch.uint8).numpy() if flat.numel() else np.empty(0, np.uint8)


# ------------------------------------------------------------------- write
def write_tensors(handle: BinaryIO, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str],
                  on_write: Optional[Callable[[Any], None]] = None) -> int:
    """Write ``tensors`` and ``metadata`` as one safetensors file to ``handle``; returns the bytes written.

    Tensors may live on any device and need not be contiguous: each is copied
    to contiguous CPU memory on its own, just before it is written, so the
    extra memory is at most the largest such tensor. ``on_write`` sees every
    buffer written, in order (to hash it).

    Raises:
        TypeError: a tensor's dtype has no safetensors name, or it is not dense.
    """
    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))  # aligned, as safetensors orders
    header: Dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name in order:
        tensor = tensors[name]
        if tensor.dtype not in _NAMES or tensor.layout != torch.strided:
            raise TypeError(f"cannot save tensor {name!r}: {tensor.dtype} ({tensor.layout}) has no safetensors "
                            f"type")
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": _NAMES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    written = _emit(handle, len(raw).to_bytes(8, "little") + raw, on_write)
    for name in order:
        tensor = tensors[name].detach()
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            tensor = tensor.to("cpu").contiguous()
        data = byte_view(tensor)
        for start in range(0, data.size, CHUNK_BYTES):
            written += _emit(handle, data[start:start + CHUNK_BYTES], on_write)
    return written


def _emit(handle: BinaryIO, data: Any, on_write: Optional[Callable[[Any], None]]) -> int:
    if on_write is not None:
        on_write(data)  # first: a hash running on its own thread overlaps with the write
    handle.write(data)
    return len(data)


# -------------------------------------------------------------------- read
@dataclass(frozen=True)
class TensorEntry:
    """One tensor the header describes: its name, dtype, shape and byte range within the data."""

    name: str
    dtype: torch.dtype
    shape: Tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    def empty(self) -> torch.Tensor:
        """A new CPU tensor of this entry's dtype and shape (its values unset)."""
        return torch.empty(self.shape, dtype=self.dtype)

    def read_into(self, handle: BinaryIO, tensor: torch.Tensor, data_start: int,
                  on_read: Optional[Callable[[Any], None]] = None, seek: bool = True) -> None:
        """Fill ``tensor`` (contiguous, CPU, this entry's dtype and shape) from the file.

        ``seek=False`` reads from the handle's current position (a sequential pass).

        Raises:
            UnsafeFileError: the file ended early.
        """
        if seek:
            handle.seek(data_start + self.begin)
        target = byte_view(tensor)
        for start in range(0, target.size, CHUNK_BYTES):
            piece = target[start:start + CHUNK_BYTES]
            got = _read_exactly(handle, piece)
            if got != piece.size:
                raise UnsafeFileError(f"the file ended inside tensor {self.name!r}")
            if on_read is not None:
                on_read(piece)


def _read_exactly(handle: BinaryIO, buffer: np.ndarray) -> int:
    view, got = memoryview(buffer), 0
    while got < len(view):
        n = handle.readinto(view[got:]) if hasattr(handle, "readinto") else _read_copy(handle, view[got:])
        if not n:
            break
        got += n
    return got


def _read_copy(handle: BinaryIO, view: memoryview) -> int:
    data = handle.read(len(view))
    view[:len(data)] = data
    return len(data)


@dataclass(frozen=True)
class Header:
    """A parsed, checked header: the tensors by name, the metadata, and where the data starts."""

    entries: Dict[str, TensorEntry]
    metadata: Dict[str, str]
    data_start: int

    def in_file_order(self) -> List[TensorEntry]:
        return sorted(self.entries.values(), key=lambda e: (e.begin, e.end))


def check_leading_bytes(head: bytes, file_size: int, name: str) -> int:
    """The header length the first 8 bytes announce, if plausible; else the one-line reason.

    Raises:
        UnsafeFileError: a pickle (``torch.save``), or a length the file cannot hold.
    """
    n = int.from_bytes(head[:8], "little") if len(head) >= 8 else -1
    if 0 < n <= MAX_HEADER_BYTES and 8 + n <= file_size and head[8:9] == b"{":
        return n
    if head[:2] == b"PK" or (head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")):
        raise UnsafeFileError(
            f"{name}: refusing to load a pickle (e.g. a torch.save file), which could run arbitrary code; "
            "distrib state files are safetensors")
    raise UnsafeFileError(f"{name}: not a safetensors state file (bad or truncated header, {file_size} bytes)")


def read_header(handle: BinaryIO, file_size: int, name: str,
                on_read: Optional[Callable[[Any], None]] = None) -> Header:
    """Read and check the header at the start of ``handle`` (a file of ``file_size`` bytes).

    Raises:
        UnsafeFileError: see `parse_header`.
    """
    head = handle.read(9)
    n = check_leading_bytes(head, file_size, name)
    rest = handle.read(n - 1)
    raw = head[8:] + rest
    if len(raw) != n:
        raise UnsafeFileError(f"{name}: not a safetensors state file (truncated header)")
    if on_read is not None:
        on_read(head[:8])
        on_read(raw)
    return parse_header(raw, file_size, name)


def parse_header(raw: bytes, file_size: int, name: str) -> Header:
    """Check a header's JSON against the file size; nothing it claims is allocated or trusted.

    Raises:
        UnsafeFileError: not JSON, nested, an unknown dtype, a shape that does
            not match its byte range, ranges that overlap, leave gaps or pass
            the end of the file, or metadata that is not text.
    """
    def bad(why: str) -> UnsafeFileError:
        return UnsafeFileError(f"{name}: not a valid safetensors state file ({why})")

    try:
        header = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise bad(f"header is not JSON: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise bad("header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise bad("__metadata__ is not an object of strings")
    data_start = 8 + len(raw)
    entries = {key: _entry(key, value, bad) for key, value in header.items()}
    position = 0
    for entry in sorted(entries.values(), key=lambda e: (e.begin, e.end)):
        if entry.begin != position:
            raise bad(f"tensor {entry.name[:80]!r} starts at byte {entry.begin}, expected {position}")
        position = entry.end
    if data_start + position != file_size:
        raise bad(f"the tensors cover {position} bytes of data, the file holds {file_size - data_start}")
    return Header(entries, dict(metadata), data_start)


def _entry(key: str, value: Any, bad: Callable[[str], UnsafeFileError]) -> TensorEntry:
    if not isinstance(value, dict) or set(value) != _ENTRY_KEYS:
        raise bad(f"entry {key[:80]!r} is not {{dtype, shape, data_offsets}}")
    dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise bad(f"tensor {key[:80]!r} has an unknown dtype {str(dtype)[:20]!r}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape) or len(shape) > 64:
        raise bad(f"tensor {key[:80]!r} has an invalid shape")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise bad(f"tensor {key[:80]!r} has invalid data_offsets")
    torch_dtype = DTYPES[dtype]
    size = math.prod(shape) * _ITEMSIZE[torch_dtype]
    if size != offsets[1] - offsets[0]:
        raise bad(f"tensor {key[:80]!r}: shape {shape} of {dtype} is {size} bytes, its range holds "
                  f"{offsets[1] - offsets[0]}")
    return TensorEntry(key, torch_dtype, tuple(shape), offsets[0], offsets[1])
