"""Reading text files: `TextLineDataset` and `Dataset.list_files`, on the FILE sharding path.

Both are file sources, so `AutoShardPolicy.FILE` (and AUTO, when there are at
least as many files as workers) gives worker ``i`` of ``n`` the files
``i, i+n, ...`` of the sorted list, as tf.data does:

    files = Dataset.list_files("/data/part-*.txt", shuffle=False)
    ds = files.interleave(TextLineDataset, cycle_length=2)   # or TextLineDataset(files)

``Dataset.from_tensor_slices(paths)`` read through ``TextLineDataset`` (by
``interleave``/``flat_map`` or ``TextLineDataset(dataset)``) is a file source too.

Lines are ``str`` without their line ending (``\\n`` or ``\\r\\n``), decoded
as UTF-8. With ``shuffle=True`` (tf.data's default for ``list_files``) each
worker shuffles its own files; TF shuffles the whole list before sharding, so
only the unshuffled order is the same file for file.

Example:
    >>> [str(x) for x in TextLineDataset(["a.txt"])]     # a.txt holds "x\\ny\\n"
    ['x', 'y']
"""
from __future__ import annotations

import glob
import gzip
from typing import List, Optional, Sequence, Union

import numpy as np

from distrib.data.dataset import Dataset
from distrib.data.sources.in_memory import FilesDataset

__all__ = ["TextLineDataset", "list_files", "read_lines", "as_file_source"]


def read_lines(path: str, compression_type: Optional[str] = None) -> np.ndarray:
    """The lines of a text file as a numpy str array, line endings removed."""
    kind = (compression_type or "").upper()
    if kind not in ("", "NONE", "GZIP"):
        raise ValueError(f"TextLineDataset: compression_type {compression_type!r} is not supported: "
                         f"use None or 'GZIP'")
    try:
        opener = gzip.open if kind == "GZIP" else open
        with opener(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise FileNotFoundError(f"TextLineDataset: cannot read {path}: {exc.strerror or exc}") from None
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return np.asarray([ln[:-1] if ln.endswith("\r") else ln for ln in lines], dtype=str)


class _LineReader:
    def __init__(self, compression_type: Optional[str]) -> None:
        self.compression_type = compression_type

    def __call__(self, path: str) -> np.ndarray:
        return read_lines(path, self.compression_type)


def TextLineDataset(filenames: Union[str, Sequence[str], Dataset], compression_type: Optional[str] = None,
                    buffer_size: Optional[int] = None, num_parallel_reads: Optional[int] = None,
                    name: Optional[str] = None) -> Dataset:  # noqa: N802 (tf.data's class name)
    """The lines of one or more text files, file after file.

    Args:
        filenames: a path, a list of paths, or a `Dataset` of paths (e.g. `list_files`).
        compression_type: None or ``"GZIP"``.
        buffer_size: accepted for tf.data compatibility.
        num_parallel_reads: accepted; files are still read in order (deterministic).
    """
    if isinstance(filenames, Dataset):
        return as_file_source(filenames).flat_map(lambda path: TextLineDataset(str(path), compression_type))
    paths = [filenames] if isinstance(filenames, (str, np.str_)) else [str(p) for p in filenames]
    return FilesDataset([str(p) for p in paths], _LineReader(compression_type))


def as_file_source(dataset: Dataset) -> Dataset:
    """``from_tensor_slices(paths)`` as a file source (so FILE sharding splits the files, as TF's does).

    Any other dataset is returned as it is.
    """
    from distrib.data.sources.in_memory import TensorSlicesDataset

    if type(dataset) is TensorSlicesDataset:
        names = dataset._table._structure
        if isinstance(names, np.ndarray) and names.dtype.kind == "U" and names.ndim == 1 and len(names):
            return FilesDataset([str(p) for p in names.tolist()], _NameReader())
    return dataset


class _NameReader:
    def __call__(self, path: str) -> List[str]:
        return [path]


def list_files(file_pattern: Union[str, Sequence[str]], shuffle: Optional[bool] = None,
               seed: Optional[int] = None, name: Optional[str] = None) -> Dataset:
    """The paths matching ``file_pattern`` (a glob or a list of globs), as str elements.

    Sorted, then shuffled unless ``shuffle=False`` (tf.data's default is to
    shuffle, reshuffling every epoch; give ``seed`` for a fixed order).
    """
    patterns = [file_pattern] if isinstance(file_pattern, str) else list(file_pattern)
    found = sorted({p for pattern in patterns for p in glob.glob(str(pattern))})
    if not found:
        raise FileNotFoundError(f"list_files: no files match {file_pattern!r}: check the pattern "
                                f"and the working directory")
    ds: Dataset = FilesDataset(found, _NameReader())
    if shuffle is None or shuffle:
        ds = ds.shuffle(len(found), seed=seed)
    return ds


