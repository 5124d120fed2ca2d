"""The on-disk layout of a `Dataset.cache(filename)` file: written aside, published whole, read in streams.

Layout: a magic line, then records (8-byte length, 4-byte masked CRC-32C of
the payload, payload; see `distrib.data.caching.records`), then a JSON index
(each record's offset, length and element count; the writing pipeline's
operator names), its 8-byte length and an end mark. A writer fills
``<name>.tmp-<pid>-<random>`` beside the final name and renames it into place
only once the index is written (``os.replace``: atomic), so a file at the
final name is always complete; an unfinished one is never read, and a writer
that is dropped early removes its temporary file. A reader validates the
frame when it opens the file (one warning and a rebuild when it does not
fit) and checks each record's CRC as it streams it (one `CacheFileError`).
"""
from __future__ import annotations

import bisect
import json
import os
import secrets
import struct
import weakref
from typing import Any, BinaryIO, Iterator, List, Optional

import google_crc32c
import numpy as np
import torch

from distrib.data.blocks import Block
from distrib.data.caching.records import RecordError, decode_record, encode_elements
from distrib.errors import DistribError

__all__ = ["CacheFileError", "CacheWriter", "CacheReader", "open_cache", "cache_path", "worker_suffix"]

MAGIC = b"distrib dataset cache v1\n"
END = b"DCEND001"
_FRAME = struct.Struct("<QI")
_TAIL = struct.Struct("<Q")
_MAX_INDEX = 64 << 20
#: A record is cut when it holds this many elements or bytes.
RECORD_ELEMENTS = 512
RECORD_BYTES = 8 << 20


class CacheFileError(DistribError):
    """A cache file that is damaged where it is being read (``tf.errors.DataLossError``'s role)."""


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def worker_suffix(num_input_pipelines: int, input_pipeline_id: int, num_local_replicas: int = 1,
                  local_replica_id: int = 0) -> str:
    """What a process adds to a cache's filename so that no two processes write one file.

    Example:
        >>> worker_suffix(1, 0), worker_suffix(2, 1), worker_suffix(2, 1, 2, 0)
        ('', '.worker-1-of-2', '.worker-1-of-2.replica-0')
    """
    tag = f".worker-{input_pipeline_id}-of-{num_input_pipelines}" if num_input_pipelines > 1 else ""
    return tag + (f".replica-{local_replica_id}" if num_local_replicas > 1 else "")


def cache_path(filename: str, suffix: str) -> str:
    """The published file of cache ``filename`` in the process with ``suffix``."""
    return f"{os.fspath(filename)}{suffix}.distrib-cache"


def _discard(handle: BinaryIO, path: str) -> None:
    handle.close()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class CacheWriter:
    """Appends elements to a temporary file; `publish` makes it the cache, `discard` drops it."""

    def __init__(self, path: str, pipeline: List[str]) -> None:
        self.path = path
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._tmp = f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        self._file = open(self._tmp, "wb")
        self._file.write(MAGIC)
        self._pipeline = pipeline
        self._records: List[List[int]] = []
        self._pending: List[Any] = []
        self._pending_bytes = 0
        self._finalizer = weakref.finalize(self, _discard, self._file, self._tmp)

    def add(self, elements: List[Any]) -> None:
        """Buffer ``elements`` (materialized), writing a record whenever one is full."""
        for element in elements:
            self._pending.append(element)
            self._pending_bytes += _size(element)
            if len(self._pending) >= RECORD_ELEMENTS or self._pending_bytes >= RECORD_BYTES:
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        payload = encode_elements(self._pending)
        offset = self._file.tell()
        self._file.write(_FRAME.pack(len(payload), _masked_crc(payload)))
        self._file.write(payload)
        self._records.append([offset, len(payload), len(self._pending)])
        self._pending, self._pending_bytes = [], 0

    def publish(self) -> None:
        """Write the index and move the file to its final name (atomically)."""
        self._flush()
        index = json.dumps({"format": 1, "pipeline": self._pipeline, "records": self._records}).encode()
        self._file.write(index + _TAIL.pack(len(index)) + END)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._tmp, self.path)
        self._finalizer.detach()

    def discard(self) -> None:
        """Close and remove the temporary file (an unfinished cache is never kept)."""
        self._finalizer()


def _size(element: Any) -> int:
    if isinstance(element, (tuple, list)):
        return sum(_size(e) for e in element)
    if isinstance(element, dict):
        return sum(_size(e) for e in element.values())
    if isinstance(element, (str, bytes)):
        return len(element)
    if isinstance(element, (torch.Tensor, np.ndarray)):
        return int(element.nbytes)
    return 64


class CacheReader:
    """Random access to the records of a published cache file (one open handle, read on demand)."""

    def __init__(self, path: str, records: List[List[int]]) -> None:
        self.path = path
        self._records = records
        self._starts: List[int] = []
        total = 0
        for _, _, count in records:
            self._starts.append(total)
            total += count
        self.total = total
        self._file: Optional[BinaryIO] = None

    def locate(self, position: int) -> int:
        """The record holding element ``position`` (``len(records)`` past the end)."""
        if position >= self.total:
            return len(self._records)
        return bisect.bisect_right(self._starts, position) - 1

    def first_element(self, record: int) -> int:
        return self._starts[record]

    def read(self, record: int) -> Block:
        """Record ``record`` as a block; `CacheFileError` naming the file and offset when damaged."""
        offset, length, count = self._records[record]
        if self._file is None:
            self._file = open(self.path, "rb")
        self._file.seek(offset)
        frame = self._file.read(_FRAME.size)
        payload = self._file.read(length)
        where = f"cache file {self.path} is damaged at byte {offset}"
        if len(frame) != _FRAME.size or len(payload) != length:
            raise CacheFileError(f"{where}: the file ends inside a record; delete it to rebuild the cache")
        size, crc = _FRAME.unpack(frame)
        if size != length or crc != _masked_crc(payload):
            raise CacheFileError(f"{where}: checksum mismatch; delete it to rebuild the cache")
        try:
            block = decode_record(payload)
        except RecordError as exc:
            raise CacheFileError(f"{where}: {exc}; delete it to rebuild the cache") from None
        if len(block) != count:
            raise CacheFileError(f"{where}: {len(block)} elements where the index says {count}")
        return block

    def blocks(self) -> Iterator[Block]:
        """Every record's block, in order (one record in memory at a time)."""
        for record in range(len(self._records)):
            yield self.read(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def open_cache(path: str, pipeline: List[str]) -> "CacheReader | str":
    """A reader for the complete cache at ``path``, or why it cannot be used ("" when absent)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            head = handle.read(len(MAGIC))
            handle.seek(max(0, size - _TAIL.size - len(END)))
            tail = handle.read(_TAIL.size + len(END))
            if head != MAGIC or len(tail) != _TAIL.size + len(END) or tail[_TAIL.size:] != END:
                return "not a distrib cache file, or an incomplete one"
            (n_index,) = _TAIL.unpack(tail[:_TAIL.size])
            index_at = size - _TAIL.size - len(END) - n_index
            if n_index > _MAX_INDEX or index_at < len(MAGIC):
                return f"its index claims {n_index} bytes"
            handle.seek(index_at)
            index = json.loads(handle.read(n_index).decode("utf-8"))
    except FileNotFoundError:
        return ""
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return f"unreadable index ({type(exc).__name__})"
    why = _check_index(index, index_at, pipeline)
    return why if why else CacheReader(path, index["records"])


def _check_index(index: Any, index_at: int, pipeline: List[str]) -> str:
    if not isinstance(index, dict) or index.get("format") != 1 or not isinstance(index.get("records"), list):
        return "its index is not a distrib cache index (format 1)"
    if index.get("pipeline") != pipeline:
        return f"it was written by pipeline {str(index.get('pipeline'))[:120]}, not this one {pipeline}"
    expected = len(MAGIC)
    for record in index["records"]:
        if (not isinstance(record, list) or len(record) != 3 or not all(type(v) is int for v in record)
                or record[0] != expected or record[1] < 1 or record[2] < 1):
            return f"its index has an invalid record entry {str(record)[:60]}"
        expected = record[0] + _FRAME.size + record[1]
    if expected != index_at:
        return "its records do not reach its index (truncated or spliced)"
    return ""
