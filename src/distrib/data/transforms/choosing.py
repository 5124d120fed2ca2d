"""``Dataset.choose_from_datasets``, ``Dataset.sample_from_datasets`` and ``Dataset.counter``.

* ``choose_from_datasets(datasets, choice_dataset, stop_on_empty_dataset=True)``:
  the next element of ``datasets[c]`` for each ``c`` of ``choice_dataset``
  (int64 scalars). When the chosen dataset is exhausted the result ends
  (``stop_on_empty_dataset=True``) or the choice is skipped.
* ``sample_from_datasets(datasets, weights=None, seed=None, stop_on_empty_dataset=False)``:
  the choices drawn at random with probabilities ``weights`` (uniform by
  default). TensorFlow's random stream cannot be reproduced, so the order is
  distrib's own (seeded like ``shuffle``: by ``seed``, else
  ``torch.manual_seed`` / the distributed dataset's agreed seed); as in TF,
  constant weights with one non-zero entry give that dataset itself.
* ``counter(start=0, step=1, dtype=int64)``: ``start, start + step, ...`` forever.

Positions are exact across checkpoints: every input's state, which inputs
are exhausted, and the number of random choices drawn so far.

Example:
    >>> ds = Dataset.choose_from_datasets([Dataset.range(3), Dataset.range(10, 13)],
    ...                                   Dataset.from_tensor_slices(np.array([0, 1, 1, 0])))
    >>> [int(v) for v in ds]
    [0, 10, 11, 1]
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from distrib.data.blocks import Block, IndexBlock, ListBlock, RangeTable, materialize
from distrib.data.dataset import Dataset
from distrib.data.transforms.element_state import END, Reader, unary_check
from distrib.data.options import INFINITE, UNKNOWN
from distrib.data.seed_mixing import mix_seed
from distrib.data.stream import BlockIterator, IterContext, default_seed

__all__ = ["ChooseDataset", "CounterDataset", "choose_from_datasets", "sample_from_datasets"]

Lineage = Tuple[int, ...]
_DRAWS = 256  # random choices drawn per chunk


class ChooseDataset(Dataset):
    """Elements of ``datasets`` in the order a choice stream gives (a dataset, or random draws)."""

    def __init__(self, datasets: Sequence[Dataset], choices: Optional[Dataset], stop_on_empty: bool,
                 weights: Optional[np.ndarray] = None, seed: Optional[int] = None,
                 rerandomize: bool = False) -> None:
        datasets = [unary_check(d, "choose_from_datasets") for d in datasets]
        if not datasets:
            raise ValueError("choose_from_datasets / sample_from_datasets need at least one dataset")
        self._n = len(datasets)
        self._inputs = tuple(([choices] if choices is not None else []) + datasets)
        self._has_choices, self._stop = choices is not None, bool(stop_on_empty)
        self._weights, self._rerandomize = weights, rerandomize
        self._seed_given = seed is not None
        self._seed = int(seed) if seed is not None else default_seed()

    def _datasets(self) -> Tuple[Dataset, ...]:
        return self._inputs[1:] if self._has_choices else self._inputs

    def _cardinality(self) -> int:
        cards = [d._cardinality() for d in self._inputs]
        return INFINITE if all(c == INFINITE for c in cards) else UNKNOWN

    def _static_spec(self) -> Any:
        return self._datasets()[0].element_spec

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        inners = [d._iterator(ctx, lineage, state["in"][i] if state else None)
                  for i, d in enumerate(self._datasets())]
        choices = None
        if self._has_choices:
            choices = self._inputs[0]._iterator(ctx, lineage, state["choice"] if state else None)
        seed = mix_seed(ctx.seed(self, self._seed, self._seed_given), *(lineage if self._rerandomize else ()))
        return _ChooseIterator(self, inners, choices, seed, state)


class _ChooseIterator(BlockIterator):
    def __init__(self, node: ChooseDataset, inners: List[BlockIterator], choices: Optional[BlockIterator],
                 seed: int, state: Optional[dict]) -> None:
        self._node, self._in, self._seed = node, inners, seed
        self._choices = Reader(choices) if choices is not None else None
        self._empty = list(state["empty"]) if state else [False] * len(inners)
        self._drawn = int(state["drawn"]) if state else 0
        self._done = bool(state["done"]) if state else False

    def _choice(self) -> Any:
        if self._choices is not None:
            value = self._choices.next()
            if value is END:
                return END
            choice = int(value)
            if not 0 <= choice < len(self._in):
                raise ValueError(f"choose_from_datasets: choice {choice} is not in [0, {len(self._in)})")
            return choice
        live = np.asarray([0.0 if e else 1.0 for e in self._empty]) * self._node._weights
        if live.sum() <= 0:
            return END
        chunk, offset = divmod(self._drawn, _DRAWS)
        draws = np.random.default_rng(mix_seed(self._seed, chunk)).random(_DRAWS)
        self._drawn += 1
        cdf = np.cumsum(live / live.sum())
        return int(min(np.searchsorted(cdf, draws[offset], side="right"), len(cdf) - 1))

    def _next(self) -> Any:
        while not self._done:
            choice = self._choice()
            if choice is END:
                self._done = True
                break
            if self._empty[choice]:
                continue
            block = self._in[choice].next_block(1)
            if block is not None:
                return materialize(block.elements()[0])
            self._empty[choice] = True
            if self._node._stop or all(self._empty):
                self._done = True
        return END

    def next_block(self, limit: int) -> Optional[Block]:
        items: List[Any] = []
        while len(items) < min(limit, 256):
            value = self._next()
            if value is END:
                break
            items.append(value)
        return ListBlock(items) if items else None

    def state(self) -> dict:
        return {"in": [it.state() for it in self._in], "empty": list(self._empty), "drawn": self._drawn,
                "done": self._done,
                "choice": None if self._choices is None else self._choices.inner.state()}


def choose_from_datasets(datasets: Sequence[Dataset], choice_dataset: Dataset,
                         stop_on_empty_dataset: bool = True) -> Dataset:
    """`Dataset.choose_from_datasets`."""
    unary_check(choice_dataset, "choose_from_datasets (choice_dataset)")
    return ChooseDataset(list(datasets), choice_dataset, stop_on_empty_dataset)


def sample_from_datasets(datasets: Sequence[Dataset], weights: Optional[Sequence[float]] = None,
                         seed: Optional[int] = None, stop_on_empty_dataset: bool = False,
                         rerandomize_each_iteration: Optional[bool] = None) -> Dataset:
    """`Dataset.sample_from_datasets`."""
    datasets = list(datasets)
    w = np.ones(len(datasets)) if weights is None else np.asarray(
        [float(x) for x in (weights.tolist() if isinstance(weights, torch.Tensor) else weights)])
    if len(w) != len(datasets) or (w < 0).any() or not np.isfinite(w).all():
        raise ValueError(f"sample_from_datasets: weights must be {len(datasets)} non-negative numbers, got "
                         f"{list(w)}")
    if w.sum() <= 0:
        raise ValueError("sample_from_datasets: at least one weight must be positive")
    nonzero = np.flatnonzero(w)
    if len(nonzero) == 1:
        return unary_check(datasets[int(nonzero[0])], "sample_from_datasets")
    return ChooseDataset(datasets, None, stop_on_empty_dataset, w, seed, bool(rerandomize_each_iteration))


class CounterDataset(Dataset):
    """`Dataset.counter`: an infinite, index-planned range."""

    def __init__(self, start: int, step: int, dtype: Any) -> None:
        self._table = RangeTable(int(start), int(step), 1 << 62, dtype or torch.int64)

    def _cardinality(self) -> int:
        return INFINITE

    def _static_spec(self) -> Any:
        return self._table.row_spec()

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        return _CounterIterator(self._table, int(state["pos"]) if state else 0)


class _CounterIterator(BlockIterator):
    def __init__(self, table: RangeTable, pos: int) -> None:
        self._table, self._pos = table, pos

    def next_block(self, limit: int) -> Optional[Block]:
        hi = self._pos + min(limit, 4096)
        block = IndexBlock(self._table, np.arange(self._pos, hi, dtype=np.int64))
        self._pos = hi
        return block

    def state(self) -> dict:
        return {"pos": self._pos}
