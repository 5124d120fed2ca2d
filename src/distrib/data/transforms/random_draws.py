"""Random numbers for random ops called in a ``map``: keyed by the element, so runs and resumes agree.

tf.data's random image ops (``tf.image.random_flip_left_right``...) draw from
a stateful stream, so what an element gets depends on how many draws came
before it. distrib's (`distrib.image`) draw from a *key* instead: inside a
``Dataset.map`` function, the key is the map's seed, the pass over the
dataset, the element's position in the map's input, the op's place among the
random calls of that function call and the op's own ``seed``; a batched call
adds each image's row in the *global* batch. So:

* exact resume: a restored iterator gives the remaining elements the draws
  they would have had (the map's element count is part of its state);
* the same example gets the same draw however many replicas or workers read
  the pipeline (each worker maps every element of the global stream, and a
  map after ``batch`` run on a replica's rows keys them by their global row);
* reading ahead (``prefetch``) changes nothing.

The map's seed is ``torch.initial_seed()`` (what ``torch.manual_seed`` sets)
mixed with the map's place in the pipeline, and is part of the iterator's
state: one process and every worker of a job that seeds torch alike agree.
Each pass over the dataset draws anew (as TF's random ops do each epoch).
Outside any map (a call in a training step), an op with a ``seed`` draws
from that seed and a per-process count of its calls; without one, from
torch's global generator.

Example:
    >>> torch.manual_seed(0)
    >>> ds = Dataset.range(4).map(lambda i: torch.tensor(uniform(None, 1)[0]))   # one number per element
    >>> it = iter(ds); first = next(it); state = it.state_dict()
    >>> resumed = iter(ds); resumed.load_state_dict(state)
    >>> [float(v) for v in resumed] == [float(v) for v in it]   # the same draws after a resume
    True
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch

from distrib.data.blocks import RowKeyed
from distrib.data.seed_mixing import mix_seed, mix_seed_after
from distrib.data.structure import call_unpacked

__all__ = ["ElementKey", "RowKeyedCall", "call_keyed", "drawing", "uniform", "uniform_values"]

_M64 = (1 << 64) - 1


class ElementKey:
    """What one call of a map function draws from: a seed source and the element's place.

    Args:
        seed: returns the map's seed.
        lineage: the pass over the dataset.
        index: the element's position in the map's input.
        first_row: the global row of a batch's first row (a replica's slice starts later).
    """

    __slots__ = ("seed", "lineage", "index", "first_row", "calls")

    def __init__(self, seed: Callable[[], int], lineage: Tuple[int, ...], index: int, first_row: int = 0) -> None:
        self.seed, self.lineage, self.index, self.first_row = seed, lineage, index, first_row
        self.calls = 0


class _Current(threading.local):
    key: Optional[ElementKey] = None


_CURRENT = _Current()
_EAGER_CALLS: Dict[int, int] = {}
_EAGER_LOCK = threading.Lock()


def call_keyed(fn: Callable[..., Any], element: Any, key: ElementKey) -> Any:
    """``fn(element)`` (tuple components as arguments) with random ops drawing from ``key``."""
    current = _CURRENT
    previous, current.key = current.key, key
    try:
        if type(element) is tuple:
            return fn(*element)
        return call_unpacked(fn, element)
    finally:
        current.key = previous


@contextlib.contextmanager
def drawing(key: ElementKey) -> Iterator[None]:
    """Random ops called inside draw from ``key``."""
    previous, _CURRENT.key = _CURRENT.key, key
    try:
        yield
    finally:
        _CURRENT.key = previous


class RowKeyedCall(RowKeyed):
    """A map function deferred onto a lazy batch: its draws keyed by the rows' place in the global batch.

    A replica that gathers rows ``lo:hi`` of a global batch calls ``at_row(lo, rows)``.
    """

    __slots__ = ("fn", "key")

    def __init__(self, fn: Callable[..., Any], key: ElementKey) -> None:
        self.fn, self.key = fn, key

    def at_row(self, first_row: int, element: Any) -> Any:
        key = self.key
        return call_keyed(self.fn, element, ElementKey(key.seed, key.lineage, key.index, key.first_row + first_row))

    def __call__(self, *args: Any) -> Any:
        return self.at_row(0, args[0] if len(args) == 1 else args)


def _call_key(op_seed: Optional[int]) -> Tuple[int, int]:
    """``(64-bit key of this call, first row)``."""
    salt = 0 if op_seed is None else (int(op_seed) & _M64) + 1
    key = _CURRENT.key
    if key is not None:
        key.calls += 1
        # the element's pool is kept: its second op's draw resumes it (the same seed as mixing all)
        return mix_seed_after((key.seed(), *key.lineage, key.index), key.calls, salt), key.first_row
    if op_seed is None:
        return int(torch.randint(0, 1 << 62, ()).item()), 0
    with _EAGER_LOCK:
        count = _EAGER_CALLS.get(salt, 0)
        _EAGER_CALLS[salt] = count + 1
    return mix_seed(salt, count), 0


_SCALAR_COUNT = 8
_UNIT = 1.0 / (1 << 53)


def uniform_values(op_seed: Optional[int], count: int) -> List[float]:
    """``uniform(op_seed, count)`` as Python floats (one image's few draws; the same numbers)."""
    key, first_row = _call_key(op_seed)
    base = (key * 0x2545F4914F6CDD1D + (first_row & _M64) * count) & _M64
    return [(_splitmix64_int((base + j) & _M64) >> 11) * _UNIT for j in range(count)]


def _splitmix64_int(x: int) -> int:
    """`_splitmix64` of one 64-bit value, in Python ints (bit for bit the same)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def uniform(op_seed: Optional[int], count: int, rows: Optional[int] = None) -> np.ndarray:
    """``count`` uniform numbers in [0, 1) (float64), or ``[rows, count]`` of them, one row per image.

    Each call of a random op calls this once; see the module docstring for
    what the numbers depend on.
    """
    if rows is None and count <= _SCALAR_COUNT:  # one image's few draws: Python ints beat numpy's set-up
        return np.array(uniform_values(op_seed, count))
    key, first_row = _call_key(op_seed)
    n = 1 if rows is None else int(rows)
    index = (np.arange(n, dtype=np.uint64)[:, None] + np.uint64(first_row)) * np.uint64(count) \
        + np.arange(count, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        bits = _splitmix64(index + np.uint64(key) * np.uint64(0x2545F4914F6CDD1D))
    values = (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    return values[0] if rows is None else values
