"""`InputOptions`: how a distributed dataset delivers batches (``tf.distribute.InputOptions``).

Pass one to ``strategy.experimental_distribute_dataset(dataset, options)`` or
``strategy.distribute_datasets_from_function(fn, options)``:

* ``experimental_fetch_to_device`` (default True): batches arrive on the
  strategy's device (for a GPU: copied from pinned memory on a side stream,
  `distrib.data.distribution.device_stager`); False leaves them on the host, and
  `Strategy.run` moves them when a step starts.
* ``experimental_per_replica_buffer_size``: batches kept read ahead per
  replica, their copies under way while earlier steps compute. None (the
  default) reads 2 ahead on an accelerator and none on the CPU; a number asks
  for that many anywhere (on the CPU the pipeline then runs ahead, which is
  how its exactness is tested). TF's default is 1.
* ``experimental_replication_mode``: only ``InputReplicationMode.PER_WORKER``
  (one input pipeline per task, TF's default, and what distrib implements).
* ``experimental_place_dataset_on_device``: only False; to keep a dataset on
  the GPU, build it from device tensors (``Dataset.from_tensor_slices((x.cuda(), y.cuda()))``):
  it is then shuffled, sliced and gathered on the device.

Reading ahead never changes which batches a step gets, nor what a checkpoint
resumes from: the iterator's position is that of the first batch not handed
out. A ``map`` function that draws from torch's *global* random generator is
the exception: read ahead, it runs before the steps in between, so it draws
in another order (use a seeded generator, or distrib's random ops).

Example:
    >>> options = distrib.InputOptions(experimental_per_replica_buffer_size=3)
    >>> dist = strategy.experimental_distribute_dataset(dataset, options)
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

import torch

__all__ = ["InputOptions", "InputReplicationMode", "AUTO_BUFFER_ON_ACCELERATORS"]

#: Batches read ahead per replica on an accelerator when the options do not say.
AUTO_BUFFER_ON_ACCELERATORS = 2


class InputReplicationMode(enum.Enum):
    """``tf.distribute.InputReplicationMode``: who runs an input pipeline."""

    PER_WORKER = "PER_WORKER"
    PER_REPLICA = "PER_REPLICA"


@dataclass(frozen=True)
class InputOptions:
    """See the module docstring."""

    experimental_fetch_to_device: Optional[bool] = None
    experimental_replication_mode: InputReplicationMode = InputReplicationMode.PER_WORKER
    experimental_place_dataset_on_device: bool = False
    experimental_per_replica_buffer_size: Optional[int] = None

    def __post_init__(self) -> None:
        size = self.experimental_per_replica_buffer_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise ValueError(f"InputOptions(experimental_per_replica_buffer_size=...) must be an int >= 0 or "
                             f"None, got {size!r}")
        if self.experimental_replication_mode is not InputReplicationMode.PER_WORKER:
            raise ValueError(f"InputOptions(experimental_replication_mode={self.experimental_replication_mode}) is "
                             "not supported: distrib runs one input pipeline per task (PER_WORKER)")
        if self.experimental_place_dataset_on_device:
            raise ValueError("InputOptions(experimental_place_dataset_on_device=True) is not supported: build the "
                             "dataset from device tensors instead (Dataset.from_tensor_slices((x.cuda(), y.cuda())))")

    def fetches_to_device(self) -> bool:
        """Whether batches are delivered on the strategy's device."""
        return self.experimental_fetch_to_device is not False

    def buffer_size(self, device: Optional[torch.device]) -> int:
        """Batches to read ahead for a replica on ``device``."""
        size = self.experimental_per_replica_buffer_size
        if size is not None:
            return size
        on_accelerator = device is not None and device.type != "cpu" and self.fetches_to_device()
        return AUTO_BUFFER_ON_ACCELERATORS if on_accelerator else 0
