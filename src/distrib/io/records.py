"""Reading and writing TFRecord files: `TFRecordWriter`, `RecordReader`, `tf_record_iterator`.

The reader streams: it holds one record at a time, checks both CRCs of every
record, and never allocates a length a header claims before checking it
against what the file can hold. Any damage is one `DataLossError` naming the
file and the byte offset of the record (offsets count uncompressed bytes).
See docs/input-pipelines.md ("Files TensorFlow wrote").
"""
from __future__ import annotations

import os
import struct
from typing import Iterator, List, Optional, Union

from distrib.io.compression import STREAM_ERRORS, TFRecordOptions, compression_name, open_read, open_write
from distrib.io.errors import DataLossError
from distrib.io.record_format import FOOTER_SIZE, HEADER_SIZE, frame, masked_crc

__all__ = ["TFRecordWriter", "RecordReader", "tf_record_iterator"]

_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_BIG = 1 << 20  # compressed streams: longer records are read in pieces of this size


class RecordReader:
    """The records of one TFRecord file, in order, from a given position.

    Args:
        path: the file.
        compression_type: ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``.
        offset: the byte offset (uncompressed) of the first record to read; a
            compressed file is decompressed from its start up to it.
        buffer_size: the read buffer in bytes (default 256 KiB).

    Example:
        >>> reader = RecordReader("data.tfrecord")
        >>> first = reader.read(1)          # [b'...']; reader.offset: where the next record starts
    """

    def __init__(self, path: str, compression_type: Optional[str] = None, offset: int = 0,
                 buffer_size: Optional[int] = None) -> None:
        self.path = os.fspath(path)
        self._compression = compression_name(compression_type)
        try:
            self._file = open_read(self.path, self._compression, buffer_size)
        except OSError as exc:
            raise FileNotFoundError(f"cannot open TFRecord file {self.path}: {exc.strerror or exc}") from None
        self._size = os.fstat(self._file.fileno()).st_size if self._compression == "" else -1
        self.offset = 0
        self._pending: Optional[DataLossError] = None  # found after good records: raised by the next read
        if offset:
            self._skip_to(int(offset))

    def _skip_to(self, offset: int) -> None:
        if self._compression == "":
            if offset > self._size:
                raise self._loss(offset, f"a saved position lies beyond the end of the file ({self._size} bytes)")
            self._file.seek(offset)
        else:
            left = offset
            while left:
                got = len(self._safe_read(min(left, _BIG), 0))
                if not got:
                    raise self._loss(offset, "a saved position lies beyond the end of the stream")
                left -= got
        self.offset = offset

    def _loss(self, offset: int, why: str) -> DataLossError:
        where = "uncompressed byte offset" if self._compression else "byte offset"
        return DataLossError(f"corrupted record at {where} {offset} of {self.path}: {why}")

    def _safe_read(self, n: int, at: int) -> bytes:
        try:
            return self._file.read(n)
        except STREAM_ERRORS as exc:
            raise self._loss(at, f"the {self._compression} stream is damaged ({exc})") from None

    def read(self, limit: int) -> List[bytes]:
        """Up to ``limit`` next records (fewer only at the end of the file).

        Damage raises `DataLossError` once the good records before it were returned.
        """
        if self._pending is not None:
            raise self._pending
        out: List[bytes] = []
        read, unpack, crc, offset = self._file.read, _HEADER.unpack, masked_crc, self.offset
        compressed = self._compression != ""
        try:
            while len(out) < limit:
                header = read(HEADER_SIZE)
                if len(header) != HEADER_SIZE:
                    if header:
                        raise self._loss(offset, f"the file ends inside a record header "
                                                 f"({len(header)} of {HEADER_SIZE} bytes)")
                    break
                length, length_crc = unpack(header)
                if crc(header[:8]) != length_crc:
                    raise self._loss(offset, "the length's CRC-32C does not match (a damaged file, "
                                             "or not a TFRecord file)")
                if not compressed and offset + HEADER_SIZE + length + FOOTER_SIZE > self._size:
                    raise self._loss(offset, f"the record claims {length} bytes but the file holds "
                                             f"{self._size - offset - HEADER_SIZE} after its header "
                                             f"(a truncated file)")
                data = read(length) if length <= _BIG else self._read_long(length, offset)
                footer = read(FOOTER_SIZE)
                if len(data) != length or len(footer) != FOOTER_SIZE:
                    raise self._loss(offset, f"the file ends inside a record of {length} bytes (a truncated file)")
                if _CRC.unpack(footer)[0] != crc(data):
                    raise self._loss(offset + HEADER_SIZE, f"the data's CRC-32C does not match (the record "
                                                           f"starting at byte {offset} is damaged)")
                out.append(data)
                offset += HEADER_SIZE + length + FOOTER_SIZE
        except STREAM_ERRORS as exc:
            self._pending = self._loss(offset, f"the {self._compression} stream is damaged ({exc})")
        except DataLossError as exc:
            self._pending = exc
        self.offset = offset
        if self._pending is not None and not out:
            raise self._pending
        return out

    def _read_long(self, length: int, offset: int) -> bytes:
        """A long record read in pieces: a lying header costs at most what the stream really holds."""
        parts, left = [], length
        while left:
            part = self._file.read(min(left, _BIG))
            if not part:
                break
            parts.append(part)
            left -= len(part)
        return b"".join(parts)

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def __enter__(self) -> "RecordReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def tf_record_iterator(path: str, options: Union[None, str, TFRecordOptions] = None) -> Iterator[bytes]:
    """The records of ``path`` one by one (``tf.compat.v1.io.tf_record_iterator``)."""
    with RecordReader(path, compression_name(options)) as reader:
        while True:
            block = reader.read(256)
            if not block:
                return
            yield from block


class TFRecordWriter:
    """``tf.io.TFRecordWriter``: writes records to a TFRecord file (plain, GZIP or ZLIB).

    Args:
        path: the file to write (replaced if it exists).
        options: ``None``, ``"GZIP"``, ``"ZLIB"`` or a `TFRecordOptions`.

    Example:
        >>> with TFRecordWriter("data.tfrecord.gz", "GZIP") as writer:
        ...     writer.write(example.SerializeToString())
    """

    def __init__(self, path: str, options: Union[None, str, TFRecordOptions] = None) -> None:
        self.path = os.fspath(path)
        self._file = open_write(self.path, options)

    def write(self, record: bytes) -> None:
        """Append one record (``bytes``; a ``str`` is written as UTF-8)."""
        if isinstance(record, str):
            record = record.encode("utf-8")
        elif not isinstance(record, (bytes, bytearray, memoryview)):
            raise TypeError(f"TFRecordWriter.write takes bytes (e.g. example.SerializeToString()), "
                            f"got a {type(record).__name__}")
        self._file.write(frame(bytes(record)))

    def flush(self) -> None:
        """Push what was written to the file (a ZLIB/GZIP stream stays readable up to here)."""
        self._file.flush()

    def close(self) -> None:
        """Finish the file (a compressed stream gets its end marker)."""
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> "TFRecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
