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

import logging
import os
from typing import TYPE_CHECKING, Any, List, Optional, Sequence

import torch

from distrib.comm.options import CommunicationImplementation, CommunicationOptions
from distrib.strategies.base import ReplicatedStrategy
from distrib.strategies.local_gpu import select_local_gpu
from distrib.strategies.local_replicas import connect_replicas, parse_replica_devices

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

_log = logging.getLogger("distrib.strategies")

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


def say_if_a_resize_changes_the_result(strategy: "Strategy", options: Optional[CommunicationOptions],
                                       keras_layers: Sequence[str] = ()) -> Optional[str]:
    """Warn once (replica 0) where an elastic job's options or layers tie a replica's result to its share.

    With ``sync_batch_norm=False`` each replica normalises with its own rows'
    statistics, with ``global_batch_dropout=False`` its dropout masks depend on
    where its rows sit among its own, and Keras's random preprocessing layers
    (``keras_layers``: their class names, which `ScopeTracker` finds in the
    models it adopts) draw by the replica's rows; either way a job that changes
    its number of workers no longer ends as a fixed-size run would. The
    strategy says its options when it is made (``options``), the tracker the
    layers (``options=None``) before the first step. Returns the line (None
    where nothing is said).

    Example (an elastic job of 2 workers with a ``RandomFlip`` in its model):
        ``distrib: this job is elastic but the model's Keras random preprocessing layer RandomFlip makes each
        replica's result depend on its share of the global batch: ...``
    """
    from distrib.comm.elastic import elastic_enabled

    local = [f"{name}=False" for name in ("sync_batch_norm", "global_batch_dropout")
             if options is not None and not getattr(options, name)]
    causes = ([f"CommunicationOptions({', '.join(local)})"] if local else []) + _layer_cause(keras_layers)
    if (not causes or not elastic_enabled() or strategy.num_replicas_in_sync <= 1
            or getattr(strategy, "replica_id", 0) != 0):
        return None
    verb = "make" if len(causes) > 1 or len(keras_layers) > 1 else "makes"
    line = (f"distrib: this job is elastic but {' and '.join(causes)} {verb} each "
            "replica's result depend on its share of the global batch: if workers join or leave, the "
            "result differs from a fixed-size run's (see docs/elastic.md)")
    _log.warning(line)
    return line


def _layer_cause(names: Sequence[str]) -> List[str]:
    """``["the model's Keras random preprocessing layers RandomFlip, RandomZoom"]``; [] for no names."""
    if not names:
        return []
    return [f"the model's Keras random preprocessing layer{'s' if len(names) > 1 else ''} {', '.join(names)}"]


def _default_device(options: CommunicationOptions, resolver: Any) -> torch.device:
    """One GPU per worker process when there are GPUs (see `distrib.strategies.local_gpu`), else the CPU."""
    if torch.cuda.is_available() and options.implementation is not CommunicationImplementation.RING:
        return select_local_gpu(resolver)
    return torch.device("cpu")
