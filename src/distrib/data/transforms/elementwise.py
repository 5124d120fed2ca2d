"""Element-wise and positional operators: map, filter, take, skip, shard, repeat, cache, ...

Each operator is a `Dataset` node plus a small `BlockIterator`. Positional
operators (take, skip, shard, repeat) work on whole index blocks; map and
filter call the user's function per element, except that a map after
``batch`` is deferred onto the lazy batch, so a distributed replica applies it
to its own slice only (tf.distribute's rebatching does the same).

Example:
    >>> [int(v) for v in Dataset.range(10).shard(3, 1)]
    [1, 4, 7]
    >>> Dataset.range(5).repeat(2).skip(3).take(4).cardinality()
    4
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import numpy as np
import torch

from distrib.data.blocks import Block, LazyBatch, ListBlock, materialize
from distrib.data.dataset import Dataset
from distrib.data.transforms.map_spec import traced_map_spec
from distrib.data.options import INFINITE, UNKNOWN, Options
from distrib.data.transforms.random_draws import ElementKey, RowKeyedCall, call_keyed
from distrib.data.seed_mixing import mix_seed
from distrib.data.stream import ALL, BlockIterator, IterContext
from distrib.data.structure import call_unpacked, to_structure

__all__ = ["MapDataset", "FilterDataset", "TakeDataset", "SkipDataset", "ShardDataset",
           "RepeatDataset", "OptionsDataset"]

Lineage = Tuple[int, ...]


class _Unary(Dataset):
    """An operator with one input and, by default, the input's cardinality and spec."""

    def __init__(self, input_dataset: Dataset) -> None:
        if not isinstance(input_dataset, Dataset):
            raise TypeError(f"expected a distrib.data.Dataset, got {type(input_dataset).__name__}")
        self._input = input_dataset
        self._inputs = (input_dataset,)

    def _cardinality(self) -> int:
        return self._input._cardinality()

    def _static_spec(self) -> Any:
        return self._input.element_spec


class _Pass(BlockIterator):
    """Hands the input's blocks through unchanged."""

    def __init__(self, inner: BlockIterator) -> None:
        self._in = inner

    def next_block(self, limit: int) -> Optional[Block]:
        return self._in.next_block(limit)

    def state(self) -> dict:
        return {"in": self._in.state()}

    def batched_by(self, size: int) -> None:
        self._in.batched_by(size)


def _inner(node: _Unary, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
    return node._input._iterator(ctx, lineage, state["in"] if state else None)


# ------------------------------------------------------------------- map / filter
class MapDataset(_Unary):
    def __init__(self, input_dataset: Dataset, fn: Callable) -> None:
        super().__init__(input_dataset)
        self._fn = fn

    def _static_spec(self) -> Any:
        return None

    def _traced_spec(self) -> Any:
        return traced_map_spec(self._input, self._fn)

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        return _MapIterator(self._fn, _inner(self, ctx, lineage, state), _MapSeed(ctx, self), lineage, state)


class _MapSeed:
    """The map's seed for random ops in its function (`distrib.data.transforms.random_draws`).

    ``torch.initial_seed()`` (what ``torch.manual_seed`` sets) mixed with the
    map's place in the pipeline, recorded in the iterator's state: the same in
    one process and in every worker of a job that seeds torch alike, so an
    example's draws do not depend on the number of replicas.
    """

    def __init__(self, ctx: IterContext, node: MapDataset) -> None:
        try:
            index = ctx.index(node)
        except KeyError:  # a dataset made inside another's function (flat_map): no place of its own
            self._seed = mix_seed(torch.initial_seed())
        else:
            self._seed = ctx.seed(node, mix_seed(torch.initial_seed(), index), True)

    def __call__(self) -> int:
        return self._seed


class _MapIterator(_Pass):
    def __init__(self, fn: Callable, inner: BlockIterator, seed: _MapSeed, lineage: Lineage,
                 state: Optional[dict]) -> None:
        super().__init__(inner)
        self._fn, self._seed, self._lineage = fn, seed, tuple(lineage)
        self._count = int(state.get("n", 0)) if state else 0  # elements mapped: keys their random draws

    def _key(self) -> ElementKey:
        key = ElementKey(self._seed, self._lineage, self._count)
        self._count += 1
        return key

    def _call(self, element: Any) -> Any:
        return to_structure(call_keyed(self._fn, element, self._key()))

    def next_block(self, limit: int) -> Optional[Block]:
        block = self._in.next_block(limit)
        if block is None:
            return None
        if type(block) is ListBlock:
            return ListBlock([x.with_map(RowKeyedCall(self._fn, self._key())) if type(x) is LazyBatch
                              else self._call(x) for x in block.items])
        return ListBlock([self._call(e) for e in block.elements()])

    def state(self) -> dict:
        return {"in": self._in.state(), "n": self._count} if self._count else {"in": self._in.state()}


class FilterDataset(_Unary):
    def __init__(self, input_dataset: Dataset, predicate: Callable) -> None:
        super().__init__(input_dataset)
        self._predicate = predicate

    def _cardinality(self) -> int:
        return UNKNOWN

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        return _FilterIterator(self._predicate, _inner(self, ctx, lineage, state))


class _FilterIterator(_Pass):
    def __init__(self, predicate: Callable, inner: BlockIterator) -> None:
        super().__init__(inner)
        self._predicate = predicate

    def next_block(self, limit: int) -> Optional[Block]:
        while True:
            block = self._in.next_block(limit)
            if block is None:
                return None
            values = [materialize(e) for e in block.elements()]
            keep = [i for i, v in enumerate(values) if _truth(call_unpacked(self._predicate, v))]
            if not keep:
                continue
            if type(block) is ListBlock:
                return ListBlock([values[i] for i in keep])
            return block.select(np.asarray(keep, dtype=np.int64))


def _truth(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"filter predicate must return a scalar boolean, got a tensor of shape "
                             f"{tuple(value.shape)}")
        return bool(value.item())
    return bool(value)


# ------------------------------------------------------------- positional operators
class TakeDataset(_Unary):
    def __init__(self, input_dataset: Dataset, count: int) -> None:
        super().__init__(input_dataset)
        self._count = int(count)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        if self._count < 0 or n == UNKNOWN:
            return n
        return self._count if n == INFINITE else min(n, self._count)

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        return _TakeIterator(self._count, _inner(self, ctx, lineage, state), state)


class _TakeIterator(_Pass):
    def __init__(self, count: int, inner: BlockIterator, state: Optional[dict]) -> None:
        super().__init__(inner)
        self._count, self._n = count, int(state["n"]) if state else 0

    def next_block(self, limit: int) -> Optional[Block]:
        if self._count >= 0:
            left = self._count - self._n
            if left <= 0:
                return None
            limit = min(limit, left)
        block = self._in.next_block(limit)
        if block is not None:
            self._n += len(block)
        return block

    def state(self) -> dict:
        return {"in": self._in.state(), "n": self._n}


class SkipDataset(_Unary):
    def __init__(self, input_dataset: Dataset, count: int) -> None:
        super().__init__(input_dataset)
        self._count = int(count)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        return 0 if self._count < 0 else max(0, n - self._count)

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        return _SkipIterator(self._count, _inner(self, ctx, lineage, state), state)


class _SkipIterator(_Pass):
    def __init__(self, count: int, inner: BlockIterator, state: Optional[dict]) -> None:
        super().__init__(inner)
        self._count, self._n = count, int(state["n"]) if state else 0

    def next_block(self, limit: int) -> Optional[Block]:
        if self._count < 0:
            return None
        while self._n < self._count:
            block = self._in.next_block(self._count - self._n)
            if block is None:
                return None
            self._n += len(block)
        return self._in.next_block(limit)

    def state(self) -> dict:
        return {"in": self._in.state(), "n": self._n}


class ShardDataset(_Unary):
    def __init__(self, input_dataset: Dataset, num_shards: int, index: int) -> None:
        super().__init__(input_dataset)
        if int(num_shards) < 1:
            raise ValueError(f"shard: num_shards must be >= 1, got {num_shards}")
        if not 0 <= int(index) < int(num_shards):
            raise ValueError(f"shard: index must be in [0, {num_shards}), got {index}")
        self._num, self._index = int(num_shards), int(index)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        return n // self._num + (1 if self._index < n % self._num else 0)

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        return _ShardIterator(self._num, self._index, _inner(self, ctx, lineage, state), state)


class _ShardIterator(_Pass):
    def __init__(self, num: int, index: int, inner: BlockIterator, state: Optional[dict]) -> None:
        super().__init__(inner)
        self._num, self._index = num, index
        self._pos = int(state["pos"]) if state else 0

    def next_block(self, limit: int) -> Optional[Block]:
        while True:
            want = min(ALL, limit * self._num)
            block = self._in.next_block(want)
            if block is None:
                return None
            first = (self._index - self._pos) % self._num
            self._pos += len(block)
            if first < len(block):
                return block.select(np.arange(first, len(block), self._num, dtype=np.int64))

    def state(self) -> dict:
        return {"in": self._in.state(), "pos": self._pos}


class RepeatDataset(_Unary):
    def __init__(self, input_dataset: Dataset, count: Optional[int]) -> None:
        super().__init__(input_dataset)
        self._count = -1 if count is None else int(count)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        if self._count < 0:
            return 0 if n == 0 else INFINITE
        if self._count == 0:
            return 0
        return n if n in (INFINITE, UNKNOWN) else n * self._count

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        return _RepeatIterator(self, ctx, lineage, state)


class _RepeatIterator(BlockIterator):
    """Restarts its input; repetition ``r`` runs with lineage ``lineage + (r,)``."""

    def __init__(self, node: RepeatDataset, ctx: IterContext, lineage: Lineage,
                 state: Optional[dict]) -> None:
        self._node, self._ctx, self._lineage = node, ctx, lineage
        self._rep = int(state["rep"]) if state else 0
        self._got = bool(state["got"]) if state else False
        self._in: Optional[BlockIterator] = None
        if state and state["in"] is not None:
            self._in = node._input._iterator(ctx, lineage + (self._rep,), state["in"])

    def next_block(self, limit: int) -> Optional[Block]:
        count = self._node._count
        while count < 0 or self._rep < count:
            if self._in is None:
                self._in = self._node._input._iterator(self._ctx, self._lineage + (self._rep,), None)
            block = self._in.next_block(limit)
            if block is not None:
                self._got = True
                return block
            if not self._got:  # a whole pass produced nothing: repeating it never will
                self._rep = count if count >= 0 else self._rep
                self._in = None
                return None
            self._rep += 1
            self._got = False
            self._in = None
        return None

    def state(self) -> dict:
        return {"rep": self._rep, "got": self._got,
                "in": None if self._in is None else self._in.state()}


# ----------------------------------------------------------------- pass-throughs
class OptionsDataset(_Unary):
    def __init__(self, input_dataset: Dataset, options: Options) -> None:
        super().__init__(input_dataset)
        if not isinstance(options, Options):
            raise TypeError(f"with_options needs a distrib.data.Options, got {type(options).__name__}")
        self._options = Options().merge(options)

    def _own_options(self) -> Optional[Options]:
        return self._options

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        return _Pass(_inner(self, ctx, lineage, state))
