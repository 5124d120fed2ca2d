"""`init_process_group`: ``torch.distributed.init_process_group`` with the device NCCL is bound to.

From torch 2.15 the ``"nccl"`` backend is the new NCCL engine, which wants the
process's GPU named at start (``device_id``); torch accepts the argument since
2.3 and then binds the group to that GPU at once. distrib passes it for NCCL
wherever this torch takes it, and never for gloo (see docs/compatibility.md).
"""
from __future__ import annotations

import inspect
from typing import Any, Optional

import torch
import torch.distributed as dist

__all__ = ["init_process_group", "device_id_for"]


def device_id_for(backend: str, device: Optional[torch.device]) -> Optional[torch.device]:
    """The ``device_id`` to give ``init_process_group``: the task's GPU under NCCL, else None.

    ``device`` None (or a CPU device) under NCCL means the current CUDA device.

    Example:
        >>> device_id_for("gloo", torch.device("cuda", 1)) is None
        True
    """
    if backend != "nccl":
        return None
    if "device_id" not in inspect.signature(dist.init_process_group).parameters:
        return None  # a torch without the parameter binds the device lazily
    if device is None or device.type != "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    return torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())


def init_process_group(backend: str, device: Optional[torch.device] = None, **kwargs: Any) -> None:
    """``dist.init_process_group(backend, **kwargs)``, with ``device_id`` where `device_id_for` gives one."""
    device_id = device_id_for(backend, device)
    if device_id is not None:
        kwargs["device_id"] = device_id
    dist.init_process_group(backend, **kwargs)
