"""Auto-sharding: which policy applies, how a pipeline is divided, FILE rewrites.

`shard` is the one entry: it resolves the policy and returns the pipeline
this worker task reads with its `Sharding` (how the feeds divide it among
replicas). `resolve_policy` turns AUTO into FILE or DATA as tf.data does
(FILE when the pipeline reads files through one `Dataset.from_files` and
there is at least one file per worker, DATA otherwise) and logs the choice
once at DEBUG on the ``distrib.data`` logger. `shard_files` gives worker ``i``
of ``n`` the files ``i, i+n, ...``. How each batch is then divided among
replicas is `distrib.data.batch_split`'s.

Example (2 worker tasks, a pipeline without files):
    >>> shard(Dataset.range(8).batch(4), num_workers=2, worker=1)[1]
    <Sharding.DATA: 'data'>
"""
from __future__ import annotations

import enum
import logging
from typing import List, Optional, Tuple

from distrib.data.dataset import Dataset
from distrib.data.options import AutoShardPolicy
from distrib.data.sources.in_memory import FilesDataset
from distrib.data.stream import walk

__all__ = ["Sharding", "shard", "resolve_policy", "shard_files", "file_sources", "resharding_limit"]

_log = logging.getLogger("distrib.data")


class Sharding(enum.Enum):
    """How a distributed dataset's stream is divided among replicas (see `distrib.data.distribution.feeds`).

    The values are what iterator states record.
    """

    DATA = "data"    #: every worker plans the same global batches; each replica takes an even slice
    OFF = "off"      #: every worker reads everything; its batches are cut into per-replica pieces
    FILE = "file"    #: each worker reads its own files; its batches are cut into per-replica pieces
    LOCAL = "local"  #: a dataset function's per-replica batches, dealt to the task's replicas

    @property
    def per_worker(self) -> bool:
        """True when workers read different streams (FILE, dataset functions)."""
        return self in (Sharding.FILE, Sharding.LOCAL)


def resharding_limit(sharding: Sharding) -> Optional[str]:
    """Why an input divided this way cannot follow a change in the number of workers (None: it can).

    Only DATA sharding keeps the global batches when workers join or leave
    (every worker reads the same global batches and takes a slice).
    """
    if sharding is Sharding.FILE:
        return ("each worker reads its own files (FILE sharding: fewer files than workers, or "
                "AutoShardPolicy.FILE), so a worker's examples leave with it")
    if sharding is Sharding.OFF:
        return ("every worker reads the whole dataset and its batches are per-worker batches "
                "(AutoShardPolicy.OFF), so the global batch would change with the number of workers")
    if sharding is Sharding.LOCAL:
        return ("a dataset function gives each worker its own stream and fixes the per-replica batch, "
                "so the global batch would change with the number of workers")
    return None


def shard(dataset: Dataset, num_workers: int, worker: int) -> Tuple[Dataset, Sharding]:
    """``(the pipeline worker ``worker`` of ``num_workers`` reads, its Sharding)`` under the dataset's options."""
    files = file_sources(dataset)
    policy = resolve_policy(files, num_workers, dataset.options().distribute.auto_shard_policy)
    if policy == AutoShardPolicy.FILE:
        return shard_files(dataset, files[0], num_workers, worker), Sharding.FILE
    return dataset, Sharding.OFF if policy == AutoShardPolicy.OFF else Sharding.DATA


def file_sources(dataset: Dataset) -> List[FilesDataset]:
    """The `Dataset.from_files` nodes of a pipeline."""
    return [node for node in walk(dataset) if isinstance(node, FilesDataset)]


def resolve_policy(files: List[FilesDataset], num_workers: int, policy: AutoShardPolicy) -> AutoShardPolicy:
    """The policy to apply (never AUTO) to a pipeline reading ``files``; an error when FILE cannot be honoured.

    ``files`` are the pipeline's `file_sources`. ``num_workers`` counts input
    pipelines (worker tasks), not replicas. With one, FILE on a pipeline
    without files reads everything (OFF), as in TF.
    """
    if policy == AutoShardPolicy.AUTO:
        if len(files) == 1 and len(files[0].paths) >= num_workers:
            _log.debug("auto_shard_policy AUTO: sharding by FILE (%d files over %d workers)",
                       len(files[0].paths), num_workers)
            return AutoShardPolicy.FILE
        reason = ("the pipeline reads no files (Dataset.from_files, list_files, TextLineDataset)" if not files else
                  f"it reads {len(files)} file sources" if len(files) > 1 else
                  f"{len(files[0].paths)} files are fewer than {num_workers} workers")
        _log.debug("auto_shard_policy AUTO: sharding by DATA (%s)", reason)
        return AutoShardPolicy.DATA
    if policy == AutoShardPolicy.FILE:
        if num_workers == 1 and len(files) != 1:
            _log.debug("auto_shard_policy FILE with one input pipeline: nothing to shard, reading all")
            return AutoShardPolicy.OFF
        if len(files) != 1:
            raise ValueError(f"AutoShardPolicy.FILE needs a pipeline that reads its files through one "
                             f"Dataset.from_files, list_files or TextLineDataset, this one has {len(files)}: "
                             f"use AutoShardPolicy.DATA")
        if len(files[0].paths) < num_workers:
            raise ValueError(f"AutoShardPolicy.FILE: {len(files[0].paths)} files for {num_workers} "
                             f"workers; every worker needs at least one file: split the data into at "
                             f"least {num_workers} files or use AutoShardPolicy.DATA")
        _log.debug("auto_shard_policy FILE: %d files over %d workers", len(files[0].paths), num_workers)
    return policy


def shard_files(dataset: Dataset, source: FilesDataset, num_workers: int, worker: int) -> Dataset:
    """The pipeline reading only worker ``worker``'s files of ``source`` (``paths[worker::num_workers]``)."""
    mine = source.with_paths(source.paths[worker::num_workers])

    def rewrite(node: Dataset) -> Dataset:
        if node is source:
            return mine
        if not node._inputs:
            return node
        inputs = [rewrite(i) for i in node._inputs]
        if all(a is b for a, b in zip(inputs, node._inputs)):
            return node
        return node._with_inputs(inputs)

    return rewrite(dataset)
