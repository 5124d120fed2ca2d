"""Which GPU a worker process uses when it drives one device.

Several tasks of a job often run on one machine, each as its own process,
and each must use its own GPU (NCCL refuses two ranks on one GPU). A task's
index among the tasks on its machine comes from, in this order:

1. ``LOCAL_RANK`` (torchrun, ``torch.distributed.launch``),
2. ``SLURM_LOCALID`` (srun),
3. its position among the training tasks of the cluster spec that share its
   host (TF_CONFIG written by hand, Kubeflow, ``distrib launch``),
4. 0 (a single process).

The index picks ``cuda:index`` among the GPUs this process sees (torch
honours ``CUDA_VISIBLE_DEVICES``). When the index is beyond the visible GPUs
— e.g. every task was given ``CUDA_VISIBLE_DEVICES`` naming its own single
GPU — the task wraps around (``index % count``); whether two tasks then really
share a physical GPU is checked across the job before any collective runs
(`distrib.comm.gpu_sharing`).

Example (TF_CONFIG with workers at host-a:2222, host-a:2223, host-b:2222,
2 GPUs per host, no LOCAL_RANK):
    worker 0 -> cuda:0, worker 1 -> cuda:1, worker 2 -> cuda:0
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import torch

from distrib.cluster.address import parse_address
from distrib.cluster.resolver_base import ClusterResolver

__all__ = ["local_task_index", "select_local_gpu"]


def local_task_index(resolver: Any, environ: Optional[Mapping[str, str]] = None) -> int:
    """This task's index among the tasks on its machine (see the module docstring)."""
    env = os.environ if environ is None else environ
    for var in ("LOCAL_RANK", "SLURM_LOCALID"):
        text = env.get(var, "").strip()
        if text:
            if not text.isdigit():
                raise ValueError(f"{var}={text!r} is not a non-negative integer: it must give this "
                                 f"process's index among the processes on its machine")
            return int(text)
    return _position_on_host(resolver)


def _position_on_host(resolver: Any) -> int:
    task = resolver.task if isinstance(resolver, ClusterResolver) else None  # another kind: no TaskInfo
    if task is None:
        return 0
    spec = resolver.cluster_spec()

    def host_of(t: Any) -> Optional[str]:
        if not spec.has_task(t.task_type, t.task_id):
            return None
        address = spec.task_address(t.task_type, t.task_id)
        return None if address is None else parse_address(address, f"{t} address")[0]

    mine = host_of(task)
    if mine is None:
        return 0
    same_host = [t for t in resolver.replica_tasks if host_of(t) == mine]
    return same_host.index(task) if task in same_host else 0


def select_local_gpu(resolver: Any, environ: Optional[Mapping[str, str]] = None) -> torch.device:
    """``cuda:i`` for this task, ``i`` = its index on the machine modulo the visible GPUs.

    Raises:
        ValueError: torch sees no GPU here.
    """
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ValueError("select_local_gpu: torch sees no CUDA device on this machine")
    return torch.device("cuda", local_task_index(resolver, environ) % count)
