"""`OneDeviceStrategy`: one replica on one explicit device.

Modules created in its scope are created on ``device``; tensors passed to
`run` are moved there. Useful to switch code between CPU and GPU, and to test
strategy-aware code with a single replica.

Example:
    >>> strategy = distrib.OneDeviceStrategy("cuda:0")
    >>> with strategy.scope():
    ...     model = torch.nn.Linear(2, 2)      # parameters on cuda:0
"""
from __future__ import annotations

import os
from typing import Optional, Union

import torch

from distrib.strategies.base import ReplicatedStrategy

__all__ = ["OneDeviceStrategy", "parse_device", "check_cpu_index", "cpu_replica_limit"]


class OneDeviceStrategy(ReplicatedStrategy):
    """A single replica on ``device`` ("cpu", "cuda:0", "/gpu:0", ...)."""

    def __init__(self, device: Union[str, torch.device]) -> None:
        super().__init__(device=parse_device(device))


def parse_device(device: Union[str, torch.device]) -> torch.device:
    """Accept torch spellings and TF ones (``"/gpu:0"``, ``"/cpu:0"``, ``"GPU:1"``)."""
    text = str(device).strip().lower()
    if "/device:" in text:
        text = text.split("/device:")[-1]
    text = text.lstrip("/").replace("gpu", "cuda")
    try:
        dev = torch.device(text)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda:0' or TF's '/gpu:0'") from None
    if dev.type == "cpu":
        check_cpu_index(dev.index, device)
        return torch.device("cpu")  # tensors report plain "cpu"; "cpu:0" would never compare equal
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asks for CUDA, but torch sees no CUDA device here")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise ValueError(
            f"device {str(device)!r} does not exist: torch sees {count} GPU{'s' if count != 1 else ''} "
            f"here (cuda:0..cuda:{count - 1}"
            f"{f', CUDA_VISIBLE_DEVICES={visible}' if visible is not None else ''}); "
            f"pick one of those")
    return dev


def cpu_replica_limit() -> int:
    """How many CPU replica names (``cpu:0``, ``cpu:1``, ...) exist on this machine.

    One per CPU core this process may use, but at least 2, so that
    ``["cpu:0", "cpu:1"]`` (testing multi-replica code) works on any machine.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(2, cores)


def check_cpu_index(index: Optional[int], device: object) -> None:
    """Reject ``cpu:N`` beyond `cpu_replica_limit` with a line naming the device and what exists."""
    limit = cpu_replica_limit()
    if index is not None and index >= limit:
        raise ValueError(
            f"device {str(device)!r} does not exist: CPU devices name CPU replicas, one process "
            f"each sharing this machine's cores, and there are cpu:0..cpu:{limit - 1} here "
            f"(one per core, at least 2); use fewer CPU replicas")
