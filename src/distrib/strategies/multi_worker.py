"""`MultiWorkerMirroredStrategy`: synchronous training across worker processes and machines.

The cluster comes from the resolver (TF_CONFIG by default, else torchrun or
SLURM variables, else a single process). Every training task (chief and
workers) drives its local devices — by default one: a GPU chosen by
its index among the tasks on its machine (``LOCAL_RANK``, ``SLURM_LOCALID``,
or its place among the TF_CONFIG tasks on its host) when there are GPUs, else the CPU — with one replica process
per device. All replicas meet at the chief's address, start from the chief's
weights and sum gradients before every optimizer step.

Example (each worker runs the same script under `distrib launch --workers 2`):
    >>> strategy = distrib.MultiWorkerMirroredStrategy()
    >>> strategy.num_replicas_in_sync
    2
    >>> # with DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1 on each worker: 4 replicas
"""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence

import torch

from distrib.comm.options import CommunicationImplementation, CommunicationOptions
from distrib.strategies.base import ReplicatedStrategy
from distrib.strategies.devices import parse_replica_devices
from distrib.strategies.layer_patches.share_warning import say_if_a_resize_changes_the_result
from distrib.strategies.local_replicas.connect import connect_replicas
from distrib.strategies.local_replicas.local_gpu import select_local_gpu

__all__ = ["MultiWorkerMirroredStrategy"]

LOCAL_DEVICES_ENV = "DISTRIB_LOCAL_DEVICES"


class MultiWorkerMirroredStrategy(ReplicatedStrategy):
    """Synchronous data parallelism across worker processes (and machines).

    Args:
        cluster_resolver: who is in the job; default `distrib.cluster.resolve_cluster()`.
        communication_options: `distrib.CommunicationOptions` (backend, timeout, buckets).
        local_devices: devices each task drives, one replica process each
            (default: ``DISTRIB_LOCAL_DEVICES`` if set, else one device).
    """

    supported_task_types = ("chief", "worker", "evaluator")

    def __init__(self, cluster_resolver: Any = None,
                 communication_options: Optional[CommunicationOptions] = None, *,
                 local_devices: Optional[Sequence[Any]] = None) -> None:
        from distrib.cluster import resolve_cluster, validate_task_types

        resolver = cluster_resolver if cluster_resolver is not None else resolve_cluster()
        validate_task_types(resolver, self.supported_task_types, type(self).__name__)
        options = communication_options or CommunicationOptions()
        if local_devices is None and os.environ.get(LOCAL_DEVICES_ENV):
            local_devices = [d for d in os.environ[LOCAL_DEVICES_ENV].split(",") if d.strip()]
        if local_devices:
            labels, devices = parse_replica_devices(local_devices)
        else:
            device = _default_device(options, resolver)
            labels, devices = [str(device)], [device]
        replicas, collective = connect_replicas(resolver, labels, devices, options)
        super().__init__(collective=collective, device=replicas.device, cluster_resolver=replicas,
                         communication_options=options)
        say_if_a_resize_changes_the_result(self, options)


def _default_device(options: CommunicationOptions, resolver: Any) -> torch.device:
    """One GPU per worker process when there are GPUs (see `distrib.strategies.local_replicas.local_gpu`), else the CPU."""
    if torch.cuda.is_available() and options.implementation is not CommunicationImplementation.RING:
        return select_local_gpu(resolver)
    return torch.device("cpu")
