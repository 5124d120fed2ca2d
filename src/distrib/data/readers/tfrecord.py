"""`TFRecordDataset`: the records of TFRecord files, streamed, one ``bytes`` element per record.

A file source (`FilesDataset`): under ``AutoShardPolicy.FILE``/``AUTO`` worker
``i`` of ``n`` reads files ``i, i+n, ...``, as tf.data does. Files are read
one record at a time (bounded memory, both CRCs checked: see
`distrib.io.records`); an iterator's state is the file index and the byte
offset of the next record, so a restored iterator seeks straight to it (a
GZIP/ZLIB file is decompressed again from its start up to that offset).
``num_parallel_reads=k`` interleaves ``k`` files record by record, TF's
deterministic order (``interleave(cycle_length=k, block_length=1)``).

Example:
    >>> ds = TFRecordDataset(["a.tfrecord", "b.tfrecord"]).map(lambda r: parse_single_example(r, spec))
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from distrib.data.blocks import ListBlock
from distrib.data.dataset import Dataset
from distrib.data.sources.in_memory import FilesDataset
from distrib.data.stream import BlockIterator, IterContext
from distrib.data.strings import STRING
from distrib.data.structure import TensorSpec
from distrib.io.compression import compression_name
from distrib.io.records import RecordReader

__all__ = ["TFRecordDataset", "TFRecordFileDataset"]

_CHUNK = 256  # records per block


class TFRecordFileDataset(Dataset):
    """The records of one TFRecord file (what `TFRecordDataset` reads each file with)."""

    def __init__(self, path: str, compression_type: Optional[str] = None,
                 buffer_size: Optional[int] = None) -> None:
        self.path = os.fspath(path)
        self._compression = compression_name(compression_type)
        self._buffer = buffer_size

    def _static_spec(self) -> Any:
        return TensorSpec((), STRING)

    def _iterator(self, ctx: IterContext, lineage: Tuple[int, ...], state: Optional[dict]) -> BlockIterator:
        return _RecordsIterator(self.path, self._compression, self._buffer, state)


class _RecordsIterator(BlockIterator):
    """Reads lazily: the file is opened on the first block, and closed at its end."""

    def __init__(self, path: str, compression: str, buffer_size: Optional[int], state: Optional[dict]) -> None:
        self._path, self._compression, self._buffer = path, compression, buffer_size
        self._offset = int(state["offset"]) if state else 0
        self._records = int(state["records"]) if state else 0
        self._done = bool(state["done"]) if state else False
        self._reader: Optional[RecordReader] = None

    def next_block(self, limit: int) -> Optional[ListBlock]:
        if self._done:
            return None
        if self._reader is None:
            self._reader = RecordReader(self._path, self._compression, self._offset, self._buffer)
        items = self._reader.read(min(limit, _CHUNK))
        self._offset = self._reader.offset
        self._records += len(items)
        if not items:
            self._done = True
            self._reader.close()
            self._reader = None
            return None
        return ListBlock(items)

    def state(self) -> dict:
        return {"offset": self._offset, "records": self._records, "done": self._done}

    def __del__(self) -> None:
        if self._reader is not None:
            self._reader.close()


class _FileRecords:
    """A `FilesDataset` reader: one file's records as a dataset."""

    def __init__(self, compression: str, buffer_size: Optional[int]) -> None:
        self.compression, self.buffer_size = compression, buffer_size

    def __call__(self, path: str) -> Dataset:
        return TFRecordFileDataset(str(path), self.compression, self.buffer_size)


class _Records(FilesDataset):
    """`FilesDataset` whose elements are records: its element spec is known without reading."""

    def _static_spec(self) -> Any:
        return TensorSpec((), STRING)


def TFRecordDataset(filenames: Union[str, Sequence[str], Dataset], compression_type: Optional[str] = None,
                    buffer_size: Optional[int] = None, num_parallel_reads: Optional[int] = None,
                    name: Optional[str] = None) -> Dataset:  # noqa: N802 (tf.data's class name)
    """The records of TFRecord files, in order: each element a ``bytes`` scalar (TF's ``tf.string``).

    Args:
        filenames: a path, a list of paths, or a `Dataset` of paths (``list_files``).
        compression_type: ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``.
        buffer_size: the read buffer of each file, in bytes (default 256 KiB).
        num_parallel_reads: read this many files interleaved, record by record
            (TF's deterministic order), as ``interleave(num_parallel_calls=k,
            deterministic=True)`` does: on the calling thread until ``interleave``
            runs its datasets in parallel.

    A damaged record raises `distrib.io.DataLossError` naming the file and offset.

    Example:
        >>> ds = TFRecordDataset("train.tfrecord.gz", compression_type="GZIP").batch(32)
        >>> batch = next(iter(ds))            # a numpy object array of 32 bytes records
        >>> parsed = distrib.io.parse_example(batch, spec)
    """
    compression = compression_name(compression_type)
    reader = _FileRecords(compression, buffer_size)
    if isinstance(filenames, Dataset):
        from distrib.data.readers.text import as_file_source

        files: Dataset = as_file_source(filenames)
    else:
        paths = _paths(filenames)
        if not num_parallel_reads or num_parallel_reads <= 1:
            return _Records(paths, reader)
        files = FilesDataset(paths, _name)  # names: FILE sharding splits them before the interleave
    cycle = int(num_parallel_reads) if num_parallel_reads and num_parallel_reads > 1 else 1
    return files.interleave(lambda path: reader(str(path)), cycle_length=cycle, block_length=1,
                            num_parallel_calls=cycle if cycle > 1 else None, deterministic=True)


def _name(path: str) -> List[str]:
    return [path]


def _paths(filenames: Union[str, Sequence[str]]) -> List[str]:
    if isinstance(filenames, (str, os.PathLike, np.str_)):
        return [os.fspath(filenames)]
    paths = [os.fspath(p) if not isinstance(p, bytes) else p.decode("utf-8") for p in filenames]
    if not paths:
        raise ValueError("TFRecordDataset needs at least one file name")
    return paths
