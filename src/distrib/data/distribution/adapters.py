"""Turn what users already have into a `Dataset`: torch datasets and loaders, arrays, iterables.

- a distrib `Dataset`: itself;
- tensors, numpy arrays, or tuples/dicts of them: `Dataset.from_tensor_slices`;
- a torch map-style ``Dataset``: one element per index, read only when needed
  (a ``TensorDataset`` is indexed directly, like tensor slices);
- a torch ``DataLoader`` over a map-style dataset: its batches, planned from its
  batch sampler as index lists, so a distributed replica fetches only its
  share of each batch; the sampler runs under a seed agreed by all workers;
- a torch ``DataLoader`` over an ``IterableDataset``, or any other re-iterable
  Python object: its items, in order (restored by re-reading and skipping).

Example:
    >>> loader = torch.utils.data.DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    >>> ds = as_dataset(loader)        # elements are (x_batch, y_batch), 64 rows each
"""
from __future__ import annotations

import threading
from typing import Any, List, Optional, Tuple

import numpy as np
import torch
from torch.utils import data as tud

from distrib.data.blocks import LazyBatch, ListBlock, MapStyleTable, Table, table_for
from distrib.data.dataset import Dataset
from distrib.data.options import UNKNOWN, Options
from distrib.data.parallel.loader_workers import WorkerTable, replica_plan
from distrib.data.sources.in_memory import ElementsIterator, IterableDataset, TableDataset
from distrib.data.seed_mixing import mix_seed
from distrib.data.stream import BlockIterator, IterContext, default_seed
from distrib.data.structure import to_structure

__all__ = ["as_dataset", "as_distributable", "as_local", "LoaderBatchesDataset", "LoaderIterableDataset"]

_GLOBAL_RNG = threading.Lock()  # the global RNG is borrowed to run samplers under an agreed seed


def as_dataset(obj: Any) -> Dataset:
    """``obj`` as a `Dataset` (see the module docstring for what each input becomes)."""
    if isinstance(obj, Dataset):
        return obj
    if isinstance(obj, tud.DataLoader):
        if isinstance(obj.dataset, tud.IterableDataset) or obj.batch_sampler is None:
            return LoaderIterableDataset(obj)
        return LoaderBatchesDataset(obj)
    if isinstance(obj, tud.IterableDataset):
        return IterableDataset(obj)
    if isinstance(obj, tud.Dataset):
        if not hasattr(obj, "__len__"):
            raise TypeError(f"{type(obj).__name__} is a map-style torch Dataset without __len__: "
                            "give it __len__, or make it an IterableDataset")
        return TableDataset(table_for(obj))
    if isinstance(obj, (torch.Tensor, np.ndarray, tuple, dict)):
        return Dataset.from_tensor_slices(obj)
    if isinstance(obj, (str, bytes)):
        raise TypeError("a string is not a dataset: pass tensors, arrays, a Dataset or an iterable")
    if hasattr(obj, "__iter__"):
        if iter(obj) is obj:
            raise TypeError(f"a one-shot iterator ({type(obj).__name__}) cannot be read more than once: "
                            "pass a re-iterable object (a list, a DataLoader) or Dataset.from_generator")
        try:
            card = len(obj)
        except TypeError:
            card = UNKNOWN
        return IterableDataset(obj, card)
    raise TypeError(f"cannot make a dataset from a {type(obj).__name__}: pass a distrib.data.Dataset, a "
                    "torch Dataset or DataLoader, tensors/arrays, or a re-iterable of elements")


def as_distributable(obj: Any, options: Any = None) -> Dataset:
    """``obj`` as the global-batch `Dataset` ``experimental_distribute_dataset`` divides.

    ``options`` (a `distrib.data.Options`) override the dataset's; other
    objects (tf.distribute.InputOptions-like) are ignored. A ``DataLoader``
    that already shards with a ``DistributedSampler`` is refused: its batches
    would be split twice.
    """
    if isinstance(obj, tud.DataLoader) and isinstance(obj.sampler, tud.DistributedSampler):
        raise ValueError("this DataLoader already shards with a DistributedSampler, and "
                         "experimental_distribute_dataset would split its batches again: give it a "
                         "plain sampler, or return it from distribute_datasets_from_function instead")
    dataset = as_dataset(obj)
    return dataset.with_options(options) if isinstance(options, Options) else dataset


def as_local(obj: Any) -> Dataset:
    """What a dataset function returned as a `Dataset` of per-replica batches (a loader: its batches, read in order)."""
    if isinstance(obj, tud.DataLoader):
        return LoaderIterableDataset(obj)
    return as_dataset(obj)


def _custom_collate(loader: tud.DataLoader) -> Any:
    from torch.utils.data._utils.collate import default_collate

    return None if loader.collate_fn is default_collate else loader.collate_fn


class LoaderBatchesDataset(Dataset):
    """The batches of a map-style ``DataLoader``, each a lazy batch of the indices its sampler chose.

    Batches are fetched when consumed, only for the rows a replica needs; with
    ``num_workers > 0`` the loader's worker processes fetch them
    (`distrib.data.parallel.loader_workers`).
    """

    def __init__(self, loader: tud.DataLoader) -> None:
        self._loader = loader
        collate = _custom_collate(loader)
        self._table = table_for(loader.dataset, collate)
        self._seed = default_seed()

    def _cardinality(self) -> int:
        return len(self._loader)

    def _iterator(self, ctx: IterContext, lineage: Tuple[int, ...], state: Optional[dict]) -> BlockIterator:
        seed = mix_seed(ctx.seed(self, self._seed, False), *lineage)
        return _LoaderBatchesIterator(self._loader, self._table, seed, state, ctx.replica_slice)


def _generator_of(source: Any) -> Optional[torch.Generator]:
    """The ``torch.Generator`` a DataLoader or sampler shuffles with (its state is saved with the
    position), or None: ``generator`` is optional on samplers and on custom loaders."""
    return getattr(source, "generator", None)  # torch DataLoader/sampler: a user sampler may have no generator


class _LoaderBatchesIterator(BlockIterator):
    def __init__(self, loader: tud.DataLoader, table: Table, seed: int, state: Optional[dict],
                 replica_slice: Optional[Tuple[int, int]] = None) -> None:
        generator = _generator_of(loader.sampler)
        if state is not None and state.get("gen") is not None and generator is not None:
            generator.set_state(torch.tensor(state["gen"], dtype=torch.uint8))
        self._gen = None if generator is None else generator.get_state().tolist()
        with _GLOBAL_RNG, torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # samplers without a generator draw from the global RNG
            self._batches: List[List[int]] = [list(b) for b in loader.batch_sampler]
        self._pos = int(state["pos"]) if state else 0
        self._table = table
        if loader.num_workers > 0 and isinstance(table, MapStyleTable):  # (tensors: one index_select is faster)
            # the loader's worker processes fetch this replica's rows, in order
            plan = replica_plan(self._batches[self._pos:], replica_slice)
            self._table = WorkerTable(table, loader, plan, _custom_collate(loader), mix_seed(seed, self._pos))

    def next_block(self, limit: int) -> Optional[ListBlock]:
        batches = self._batches
        if self._pos >= len(batches):
            return None
        hi = min(len(batches), self._pos + limit)
        out = [LazyBatch(self._table, np.asarray(b, dtype=np.int64)) for b in batches[self._pos:hi]]
        self._pos = hi
        return ListBlock(out)

    def state(self) -> dict:
        return {"pos": self._pos, "gen": self._gen}


class LoaderIterableDataset(IterableDataset):
    """The batches of a ``DataLoader`` read by iterating it (iterable datasets, custom loaders).

    Restoring re-iterates the loader and skips the batches already consumed;
    the loader's ``generator`` state (when it has one) is saved and restored
    with the position, so a seeded shuffle comes back in the same order.
    """

    def __init__(self, loader: tud.DataLoader) -> None:
        try:
            card = len(loader)
        except TypeError:
            card = UNKNOWN
        super().__init__(loader, card)

    def _iterator(self, ctx: IterContext, lineage: Tuple[int, ...], state: Optional[dict]) -> BlockIterator:
        return _LoaderIterator(self._iterable, state)


class _LoaderIterator(BlockIterator):
    def __init__(self, loader: tud.DataLoader, state: Optional[dict]) -> None:
        generator = _generator_of(loader)
        if state is not None and state.get("gen") is not None and generator is not None:
            generator.set_state(torch.tensor(state["gen"], dtype=torch.uint8))
        self._gen = None if generator is None else generator.get_state().tolist()
        self._inner = ElementsIterator(lambda: iter(loader), to_structure,
                                       {"pos": state["pos"]} if state else None)

    def next_block(self, limit: int) -> Optional[ListBlock]:
        return self._inner.next_block(limit)

    def state(self) -> dict:
        return {"pos": self._inner.state()["pos"], "gen": self._gen}
