"""Distributed datasets: ``experimental_distribute_dataset`` and ``distribute_datasets_from_function``.

As in tf.distribute, an input pipeline belongs to a worker *task*: the local
replicas of a task (Mirrored devices, ``DISTRIB_LOCAL_DEVICES``) share it and
split each of its batches (each replica process runs the task's pipeline and
keeps its part; see `distrib.data.distribution.feeds`).

`distribute_dataset` takes a dataset batched with the **global** batch size.
How it is divided follows ``options().distribute.auto_shard_policy`` (see
`AutoShardPolicy`), with one pipeline per task:

- DATA: every replica gets an even, contiguous slice of each global batch
  (``global / num_replicas`` rows; a partial batch split as evenly as
  possible). Every worker plans the same global order of indices (unseeded
  shuffles get one seed agreed at creation) and gathers only its own rows.
- FILE (AUTO on a `Dataset.from_files` pipeline): task ``i`` of ``W`` reads
  files ``i, i+W, ...``; OFF: every task reads everything. The task's batches
  are cut into per-replica pieces filled in order, taken by its local
  replicas step by step, so a partial batch stays with the first replicas.
  FILE on a pipeline without files is ignored with one task, an error with more.

`distribute_from_function` calls ``dataset_fn(strategy.input_context())`` (one
pipeline per task) and deals its elements to the task's local replicas in turn.

End of data never hangs and never drops examples: when workers' inputs can
end at different steps (per-worker inputs, or lengths only known by reading),
workers agree, and a worker that ran out receives *empty* batches (zero rows,
right dtypes) until every worker is done, so each step still has all
replicas. The agreement costs one small collective per ``iter()`` where every
worker's length is known, one per step only where it is not; a global
stream of known length needs none.

Positions are checkpointable: ``DistributedIterator.state_dict()`` is a
JSON-able dict; ``load_state_dict`` continues with exactly the remaining
batches. Under DATA and OFF the state describes the global stream, so it can
be restored onto a different number of workers (logged at INFO).

Example:
    >>> dataset = Dataset.from_tensor_slices((x, y)).shuffle(60000).repeat().batch(128)
    >>> dist = strategy.experimental_distribute_dataset(dataset)   # 2 workers: 64 rows each
    >>> it = iter(dist); xb, yb = next(it)
    >>> saved = it.state_dict()        # later: iter(dist).load_state_dict(saved)
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, Optional

import torch

from distrib.comm.elastic import elastic_enabled
from distrib.data.distribution.adapters import as_distributable, as_local
from distrib.data.caching.cache_file import worker_suffix
from distrib.data.distribution.distributed_iterator import STATE_VERSION, DistributedIterator, DistributedSource, check_version
from distrib.data.distribution.input_context import InputContext, InputHost
from distrib.data.distribution.input_options import InputOptions
from distrib.data.options import INFINITE, UNKNOWN
from distrib.data.distribution.sharding import Sharding, resharding_limit, shard
from distrib.data.stream import IterContext, default_seed
from distrib.utils.pending_restore import PendingRestore

_log = logging.getLogger("distrib.data")

__all__ = ["distribute_dataset", "distribute_from_function", "DistributedDataset", "DistributedIterator"]


def distribute_dataset(strategy: InputHost, dataset: Any, options: Any = None) -> "DistributedDataset":
    """``strategy.experimental_distribute_dataset(dataset)``: split each global batch among replicas.

    Args:
        strategy: the `InputHost` (a strategy, or an `InputBinding`): placement, device, collective.
        dataset: a distrib `Dataset` batched with the global batch size, a torch
            ``DataLoader`` (its ``batch_size`` is the global batch), a torch
            ``Dataset``, tensors/arrays, or a re-iterable of global batches.
        options: a `distrib.InputOptions` (how batches reach the device, how many are read
            ahead), or a `distrib.data.Options` overriding the dataset's; other
            objects (tf.distribute.InputOptions-like) are accepted and ignored.
    """
    placement = strategy.input_placement()
    whole = as_distributable(dataset, None if isinstance(options, InputOptions) else options)
    mine, sharding = shard(whole, placement.num_input_pipelines, placement.input_pipeline_id)
    return DistributedDataset(strategy, mine, sharding, _agreed_seed(strategy), _input_options(options))


def distribute_from_function(strategy: InputHost, dataset_fn: Callable[[InputContext], Any],
                             options: Any = None) -> "DistributedDataset":
    """``strategy.distribute_datasets_from_function(fn)``: this worker's ``fn(input_context)``, unbatched.

    The result (a distrib `Dataset`, a ``DataLoader`` or any re-iterable of
    per-replica batches) is used as is. Unseeded shuffles inside it share a
    seed across workers, so shuffle-then-``shard`` gives disjoint shards.
    """
    seed = _agreed_seed(strategy)
    result = dataset_fn(strategy.input_context())
    if result is None:
        raise ValueError("the dataset function returned None: it must return a distrib.data.Dataset, "
                         "a DataLoader or an iterable of per-replica batches")
    return DistributedDataset(strategy, as_local(result), Sharding.LOCAL, seed, _input_options(options))


def _input_options(options: Any) -> InputOptions:
    return options if isinstance(options, InputOptions) else InputOptions()


_RNG_LOCK = threading.Lock()


def _agreed_seed(strategy: InputHost) -> Optional[int]:
    """One seed for unseeded random ops, broadcast from replica 0 (None on a single replica)."""
    if strategy.input_placement().num_replicas_in_sync <= 1 and not strategy.collective.elastic:
        return None  # (an elastic job takes the multi-replica path from one worker on: it may grow)
    # Drawn without advancing the global generator: distributing (which fit does after
    # BackupAndRestore restored the RNG) must not shift the draws of dropout and the like.
    # One thread at a time: torch's get_rng_state can deadlock with a second caller when
    # a garbage collection runs inside it (seen with replicas on threads).
    with _RNG_LOCK, torch.random.fork_rng(devices=[]):
        mine = default_seed()
    return int(strategy.collective.broadcast_json(mine, 0))


class DistributedDataset:
    """What ``experimental_distribute_dataset`` / ``distribute_datasets_from_function`` return.

    Each ``iter()`` is a new pass (reshuffled); ``state_dict()``/``load_state_dict()``
    carry the pass count and the last iterator's position, and a loaded
    position waits (a `PendingRestore`) for the next ``iter()``.
    """

    def __init__(self, strategy: InputHost, dataset: Any, sharding: Sharding, seed: Optional[int],
                 options: Optional[InputOptions] = None) -> None:
        ctx = IterContext(dataset, seed)
        placement = strategy.input_placement()
        ctx.cache_suffix = worker_suffix(placement.num_input_pipelines, placement.input_pipeline_id,
                                         placement.num_local_replicas, placement.local_replica_id)
        if sharding is Sharding.DATA:  # replicas gather their slice of each batch (a DataLoader's workers plan it)
            ctx.replica_slice = (placement.num_replicas_in_sync, placement.replica_id)
        self._source = DistributedSource(strategy, dataset, sharding, ctx, options or InputOptions())
        why = resharding_limit(sharding)
        if why is not None and elastic_enabled() and strategy.input_placement().num_replicas_in_sync > 1:
            _log.warning("distrib: this job is elastic but its input cannot be resharded if workers join or "
                         "leave: %s; it can only lose and replace workers (see docs/elastic.md)", why)
        self._last: Optional[DistributedIterator] = None
        self._position: PendingRestore[dict] = PendingRestore()

    @property
    def per_worker(self) -> bool:
        """True when workers read different streams (FILE, dataset functions)."""
        return self._source.sharding.per_worker

    def __iter__(self) -> DistributedIterator:
        it = DistributedIterator(self._source)
        self._position.apply(it.load_state_dict)
        self._last = it
        return it

    @property
    def element_spec(self) -> Any:
        """The spec of one replica's batch."""
        return self._source.element_spec

    def cardinality(self) -> int:
        """Steps per pass when every worker knows it without reading, else `UNKNOWN`/`INFINITE`."""
        n = self._source.dataset.cardinality()
        if self._source.sharding is Sharding.DATA or n == INFINITE:
            return n
        return UNKNOWN

    def state_dict(self) -> Dict[str, Any]:
        """The pass count and the last iterator's position (collective for per-worker inputs)."""
        last = self._last
        if last is not None and last.finished:  # a finished pass: the next iter() starts a new one
            last = None
        return {"version": STATE_VERSION, "ctx": self._source.ctx.state(),
                "iterator": None if last is None else last.state_dict()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore the pass count; the next ``iter()`` continues from the saved position."""
        check_version(state)
        self._source.ctx.load_state(state["ctx"])
        self._position.hold(state.get("iterator"))
