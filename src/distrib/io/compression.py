"""GZIP and ZLIB streams for record files, read and written incrementally.

`open_read` returns a binary file object whose ``read(n)`` gives ``n``
decompressed bytes (fewer only at the end), decompressing as it goes: memory
stays bounded whatever the file's size. `open_write` is its counterpart.
`TFRecordOptions` is ``tf.io.TFRecordOptions`` (compression type and level;
TF's buffer and zlib tuning fields are accepted).
"""
from __future__ import annotations

import dataclasses
import gzip
import io
import zlib
from typing import BinaryIO, Optional, Union

__all__ = ["TFRecordOptions", "compression_name", "open_read", "open_write", "STREAM_ERRORS"]

_CHUNK = 1 << 16

#: What a damaged compressed stream raises while it is read.
STREAM_ERRORS = (zlib.error, EOFError, gzip.BadGzipFile)


@dataclasses.dataclass
class TFRecordOptions:
    """``tf.io.TFRecordOptions``: how a record file is compressed.

    Args:
        compression_type: ``None``/``""`` (none), ``"GZIP"`` or ``"ZLIB"``.
        compression_level: zlib's level, 0-9 (default 6, as TF's).
        window_bits: zlib's window bits for ZLIB (default 15).
        flush_mode, input_buffer_size, output_buffer_size, compression_method, mem_level, compression_strategy: accepted for TF compatibility.
    """

    compression_type: Optional[str] = None
    flush_mode: Optional[int] = None
    input_buffer_size: Optional[int] = None
    output_buffer_size: Optional[int] = None
    window_bits: Optional[int] = None
    compression_level: Optional[int] = None
    compression_method: Optional[int] = None
    mem_level: Optional[int] = None
    compression_strategy: Optional[int] = None

    @staticmethod
    def get_compression_type_string(options: Union[None, str, "TFRecordOptions"]) -> str:
        """``""``, ``"GZIP"`` or ``"ZLIB"`` for ``options`` (a name or a `TFRecordOptions`)."""
        return compression_name(options)


def compression_name(options: Union[None, str, TFRecordOptions]) -> str:
    """The compression ``options`` name: ``""``, ``"GZIP"`` or ``"ZLIB"``; an error for anything else."""
    kind = options.compression_type if isinstance(options, TFRecordOptions) else options
    name = (kind or "").upper()
    if name == "NONE":
        name = ""
    if name not in ("", "GZIP", "ZLIB"):
        raise ValueError(f"compression_type must be None, '', 'GZIP' or 'ZLIB', got {kind!r}")
    return name


class _ZlibRaw(io.RawIOBase):
    """A zlib stream (or several, back to back) decompressed on demand."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._d = zlib.decompressobj()
        self._started = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: "memoryview") -> int:  # type: ignore[override]
        want = len(buffer)
        while True:
            if self._d.unconsumed_tail:
                data = self._d.decompress(self._d.unconsumed_tail, want)
            else:
                if self._d.eof:
                    rest = self._d.unused_data
                    self._d = zlib.decompressobj()
                    self._started = False
                    chunk = rest or self._raw.read(_CHUNK)
                    if not chunk:
                        return 0
                else:
                    chunk = self._raw.read(_CHUNK)
                    if not chunk:
                        if self._started:
                            raise EOFError("the ZLIB stream ends before its end marker")
                        return 0
                self._started = True
                data = self._d.decompress(chunk, want)
            if data:
                buffer[:len(data)] = data
                return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_read(path: str, compression: str, buffer_size: Optional[int] = None) -> BinaryIO:
    """``path`` opened for reading, decompressed on the fly when ``compression`` says so."""
    size = int(buffer_size) if buffer_size and buffer_size > 0 else 1 << 18
    if compression == "":
        return open(path, "rb", buffering=size)
    if compression == "GZIP":
        return io.BufferedReader(gzip.GzipFile(path, mode="rb"), size)  # type: ignore[arg-type]
    return io.BufferedReader(_ZlibRaw(open(path, "rb", buffering=_CHUNK)), size)


class _ZlibWriter(io.RawIOBase):
    def __init__(self, raw: BinaryIO, level: int, window_bits: int) -> None:
        self._raw = raw
        self._c = zlib.compressobj(level, zlib.DEFLATED, window_bits)
        self._finished = False

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._raw.write(self._c.compress(data))
        return len(data)

    def flush(self) -> None:
        if not self.closed and not self._finished:
            self._raw.write(self._c.flush(zlib.Z_SYNC_FLUSH))
            self._raw.flush()

    def close(self) -> None:
        if not self.closed and not self._finished:
            self._raw.write(self._c.flush(zlib.Z_FINISH))
            self._finished = True
            self._raw.close()
        super().close()


def open_write(path: str, options: Union[None, str, TFRecordOptions]) -> BinaryIO:
    """``path`` opened for writing (truncated), compressing as ``options`` say."""
    name = compression_name(options)
    level = options.compression_level if isinstance(options, TFRecordOptions) else None
    level = 6 if level is None or level < 0 else int(level)
    if name == "":
        return open(path, "wb")
    if name == "GZIP":
        return gzip.GzipFile(path, mode="wb", compresslevel=level, mtime=0)  # type: ignore[return-value]
    raw = open(path, "wb")
    bits = options.window_bits if isinstance(options, TFRecordOptions) and options.window_bits else zlib.MAX_WBITS
    return _ZlibWriter(raw, level, int(bits))  # type: ignore[return-value]
