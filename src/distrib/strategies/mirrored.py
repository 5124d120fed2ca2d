"""`MirroredStrategy`: synchronous training on the devices of one machine.

One replica per device — all visible GPUs by default, the CPU when there are
none; ``devices=["cpu:0", "cpu:1"]`` gives two CPU replicas (the usual way to
test multi-replica code on a laptop; each gets a fair share of the cores).
With no ``devices``, ``DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1`` (if set) picks the
devices instead, so a tutorial's unchanged ``MirroredStrategy()`` runs on two
CPU replicas.
Run from a plain ``python train.py``, the strategy re-launches the script
once per extra device (see `distrib.strategies.local_replicas.connect`): the whole
script runs in every replica, only replica 0 prints. Under ``distrib launch``
each launched task is adopted as one replica instead. Either way, code
outside every scope behaves as in TF's one process (trains identically in
each replica process, side effects once; see
`distrib.strategies.local_replicas.replica_process`).

Example:
    >>> strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    >>> strategy.num_replicas_in_sync
    2
"""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence

import torch

from distrib.comm.options import CommunicationOptions
from distrib.data.distribution.input_context import InputPlacement
from distrib.strategies.base import ReplicatedStrategy
from distrib.strategies.devices import parse_replica_devices
from distrib.strategies.local_replicas import replica_process
from distrib.strategies.local_replicas.connect import connect_replicas
from distrib.strategies.local_replicas.local_gpu import local_task_index
from distrib.strategies.multi_worker import LOCAL_DEVICES_ENV

__all__ = ["MirroredStrategy"]


class MirroredStrategy(ReplicatedStrategy):
    """One replica per local device, gradients all-reduced.

    Args:
        devices: e.g. ``["cuda:0", "cuda:1"]``, ``["/gpu:0"]``, ``["cpu:0", "cpu:1"]``; default:
            ``DISTRIB_LOCAL_DEVICES`` (comma-separated) if set, else every GPU, else the CPU.
        cross_device_ops: `distrib.NcclAllReduce()`, `HierarchicalCopyAllReduce()`
            (both NCCL) or `ReductionToOneDevice()` (gloo); default: NCCL on GPUs, gloo on CPUs.
        communication_options: timeout and bucket settings (distrib extension).
    """

    supported_task_types = ("chief", "worker")

    def __init__(self, devices: Optional[Sequence[Any]] = None, cross_device_ops: Any = None,
                 communication_options: Optional[CommunicationOptions] = None) -> None:
        from distrib.cluster import resolve_cluster, validate_task_types

        if devices is None and os.environ.get(LOCAL_DEVICES_ENV, "").strip():
            devices = [d.strip() for d in os.environ[LOCAL_DEVICES_ENV].split(",") if d.strip()]
        if devices is None:
            devices = ([f"cuda:{i}" for i in range(torch.cuda.device_count())]
                       if torch.cuda.is_available() else ["cpu:0"])
        if not devices:
            raise ValueError("MirroredStrategy(devices=[]) needs at least one device")
        labels, devs = parse_replica_devices(devices)
        if len(set(labels)) != len(labels):
            raise ValueError(f"MirroredStrategy devices repeat a device: {labels}")
        options = communication_options or CommunicationOptions()
        if cross_device_ops is not None:
            options = CommunicationOptions(implementation=cross_device_ops.implementation,
                                           timeout_seconds=options.timeout_seconds,
                                           bucket_cap_mb=options.bucket_cap_mb,
                                           gradient_compression=options.gradient_compression)
        resolver = resolve_cluster()
        validate_task_types(resolver, self.supported_task_types, type(self).__name__)
        self._adopted = resolver.world_size > 1
        if self._adopted:
            # Adopted: each launched task is one replica, on its own device of this machine.
            local = local_task_index(resolver) % len(devs)
            labels, devs = [labels[local]], [devs[local]]
        replicas, collective = connect_replicas(resolver, labels, devs, options)
        replica_process.mark(collective.rank, collective.world_size, collective)
        super().__init__(collective=collective, device=replicas.device, cluster_resolver=replicas,
                         communication_options=options)

    def input_placement(self) -> InputPlacement:
        """One input pipeline: the replicas (adopted tasks too) are this machine's devices."""
        n = self.num_replicas_in_sync
        if not self._adopted or n <= 1:
            return super().input_placement()
        return InputPlacement(num_local_replicas=n, local_replica_id=self.replica_id)
