"""Refuse (or avoid) NCCL when two tasks of a job would use the same GPU.

NCCL cannot run two ranks on one GPU; it fails at the first collective with
``NCCL error ... invalid usage`` and nothing says why. So before the process
group is created, every task publishes in the rendezvous store which physical
GPU it drives (its host name and the ``CUDA_VISIBLE_DEVICES`` entry of its
device, else the device index) and every task checks the whole table. All
tasks read the same table, so they all reach the same decision:

* ``CommunicationImplementation.NCCL``: stop with one line naming both tasks,
  the GPU and the fix (`GpuSharingError`);
* ``AUTO``: use gloo instead and say so in the log.

Example error:
    worker 0 (10.0.0.1:2222) and worker 1 (10.0.0.1:2223) would both use GPU 0 on host
    node-a; NCCL cannot run two tasks on one GPU: give each task on a host its own GPU ...
"""
from __future__ import annotations

import json
import logging
import os
import socket
from datetime import timedelta
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import torch

from distrib.comm.errors import DistribCommError

__all__ = ["GpuSharingError", "physical_gpu", "find_shared_gpu", "choose_backend"]

log = logging.getLogger("distrib.comm")


class GpuSharingError(DistribCommError):
    """Two tasks would drive the same GPU under NCCL."""


def physical_gpu(device: torch.device, environ: Optional[Mapping[str, str]] = None) -> str:
    """The GPU behind ``device`` as this machine names it: its CUDA_VISIBLE_DEVICES entry or index."""
    env = os.environ if environ is None else environ
    index = device.index or 0
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[index] if index < len(visible) else str(index)


def find_shared_gpu(table: Mapping[int, Tuple[str, str]]) -> Optional[Tuple[int, int, str, str]]:
    """First pair of ranks with the same (host, gpu) in ``table``: ``(a, b, host, gpu)``."""
    seen: Dict[Tuple[str, str], int] = {}
    for rank in sorted(table):
        key = table[rank]
        if key in seen:
            return seen[key], rank, key[0], key[1]
        seen[key] = rank
    return None


def _let_every_task_read_the_table(store: Any, rank: int, world_size: int, timeout: float) -> None:
    """Before stopping, make sure the store outlives every task's read of the table.

    Task 0 hosts the store: had it exited at once, a slower task could lose the
    store before reading the table and report a lost connection instead of the clash.
    Every task marks that it has read; task 0 waits for those marks (bounded by
    ``timeout``: a task that died meanwhile must not keep the error from being raised).
    """
    store.set(f"distrib/gpu/read/{rank}", "1")
    if rank != 0:
        return
    try:
        store.wait([f"distrib/gpu/read/{r}" for r in range(world_size)], timedelta(seconds=timeout))
    except Exception:  # noqa: BLE001 - a timeout or a lost peer: the clash is still the error to raise
        log.debug("distrib: not every task confirmed reading the GPU table", exc_info=True)


def choose_backend(store: Any, rank: int, world_size: int, device: torch.device, backend: str,
                   auto: bool, timeout: float, describe: Callable[[int], str]) -> str:
    """``backend``, unless NCCL would put two tasks on one GPU (see the module docstring)."""
    if backend != "nccl" or device.type != "cuda":
        return backend
    store.set(f"distrib/gpu/{rank}", json.dumps([socket.gethostname(), physical_gpu(device)]))
    keys = [f"distrib/gpu/{r}" for r in range(world_size)]
    store.wait(keys, timedelta(seconds=timeout))
    table = {r: tuple(json.loads(store.get(k).decode())) for r, k in enumerate(keys)}
    shared = find_shared_gpu(table)  # type: ignore[arg-type]
    if shared is None:
        return backend
    a, b, host, gpu = shared
    clash = f"{describe(a)} and {describe(b)} would both use GPU {gpu} on host {host}"
    if auto:
        if rank == 0:
            log.warning("distrib: %s; NCCL cannot run two tasks on one GPU, so the job uses gloo "
                        "instead (slower; give each task its own GPU to get NCCL)", clash)
        return "gloo"
    _let_every_task_read_the_table(store, rank, world_size, timeout)
    raise GpuSharingError(
        f"{clash}; NCCL cannot run two tasks on one GPU: give each task on a host its own GPU "
        f"(LOCAL_RANK / SLURM_LOCALID, or one CUDA_VISIBLE_DEVICES entry per task), run fewer "
        f"tasks per host, or choose CommunicationImplementation.RING (gloo)")
