"""Variable partitioners (``tf.distribute.experimental.partitioners``).

A partitioner decides into how many shards a variable is split along its
first axis: ``partitioner(shape, dtype) -> [num_shards, 1, 1, ...]``. Shards
are as even as possible, the first ones one row larger (``torch.tensor_split``),
and are placed on the ps tasks round-robin, continuing the order in which
variables are created.

Example:
    >>> FixedShardsPartitioner(num_shards=2)((10, 3), torch.float32)
    [2, 1]
    >>> MinSizePartitioner(min_shard_bytes=40, max_shards=4)((10, 3), torch.float32)   # 120 bytes
    [3, 1]
    >>> MaxSizePartitioner(max_shard_bytes=48)((10, 3), torch.float32)                  # 4 rows each
    [3, 1]
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence

import torch
from distrib.utils.public_names import public_dir

__all__ = ["Partitioner", "FixedShardsPartitioner", "MinSizePartitioner", "MaxSizePartitioner"]


def __dir__() -> "list[str]":
    return public_dir(globals(), __all__)


def _nbytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def _result(shape: Sequence[int], shards: int) -> List[int]:
    shards = max(1, min(int(shards), int(shape[0]))) if len(shape) else 1
    return [shards] + [1] * (len(shape) - 1) if len(shape) else []


class Partitioner:
    """Base: ``__call__(shape, dtype)`` returns the number of partitions per axis (only axis 0 > 1)."""

    def __call__(self, shape: Sequence[int], dtype: torch.dtype) -> List[int]:
        raise NotImplementedError


class FixedShardsPartitioner(Partitioner):
    """Exactly ``num_shards`` shards (fewer if the first axis is shorter)."""

    def __init__(self, num_shards: int) -> None:
        if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
            raise ValueError(f"FixedShardsPartitioner: num_shards must be an integer >= 1, got {num_shards!r}")
        self.num_shards = num_shards

    def __call__(self, shape: Sequence[int], dtype: torch.dtype) -> List[int]:
        return _result(shape, self.num_shards)


class MinSizePartitioner(Partitioner):
    """As many shards as keep each at least ``min_shard_bytes``, at most ``max_shards``."""

    def __init__(self, min_shard_bytes: int = 256 << 10, max_shards: int = 1,
                 bytes_per_string: int = 16) -> None:
        if min_shard_bytes < 1 or max_shards < 1:
            raise ValueError(f"MinSizePartitioner: min_shard_bytes and max_shards must be >= 1, got "
                             f"{min_shard_bytes!r} and {max_shards!r}")
        self.min_shard_bytes, self.max_shards = int(min_shard_bytes), int(max_shards)
        self.bytes_per_string = bytes_per_string

    def __call__(self, shape: Sequence[int], dtype: torch.dtype) -> List[int]:
        return _result(shape, min(self.max_shards, max(1, _nbytes(shape, dtype) // self.min_shard_bytes)))


class MaxSizePartitioner(Partitioner):
    """As few shards as keep each at most ``max_shard_bytes`` (at least one row each)."""

    def __init__(self, max_shard_bytes: int, max_shards: Optional[int] = None,
                 bytes_per_string: int = 16) -> None:
        if max_shard_bytes < 1 or (max_shards is not None and max_shards < 1):
            raise ValueError(f"MaxSizePartitioner: max_shard_bytes and max_shards must be >= 1, got "
                             f"{max_shard_bytes!r} and {max_shards!r}")
        self.max_shard_bytes, self.max_shards = int(max_shard_bytes), max_shards
        self.bytes_per_string = bytes_per_string

    def __call__(self, shape: Sequence[int], dtype: torch.dtype) -> List[int]:
        if not len(shape) or shape[0] == 0:
            return _result(shape, 1)
        row = max(1, _nbytes(shape, dtype) // shape[0])
        rows_per_shard = max(1, self.max_shard_bytes // row)
        shards = math.ceil(shape[0] / rows_per_shard)
        if self.max_shards is not None:
            shards = min(shards, self.max_shards)
        return _result(shape, shards)
