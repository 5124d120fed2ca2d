"""Device names a strategy accepts: torch's spellings, TF's, and CPU replica names.

``"cuda:0"``, ``"/gpu:0"``, ``"GPU:0"``, ``"/device:GPU:0"`` and TF's full
name ``"/job:localhost/replica:0/task:0/device:GPU:0"`` name the same GPU;
``"cpu:N"`` (or ``"/device:CPU:N"``...) names CPU replica N (one process each,
sharing this machine's cores), which must exist on this machine
(`cpu_replica_limit`). A full name must be this process's
(``/job:localhost/replica:0/task:0``): a strategy's device list names local
devices.

Example:
    >>> parse_device("/CPU:0")
    device(type='cpu')
    >>> parse_replica_devices(["/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"])
    (['cpu:0', 'cpu:1'], [device(type='cpu'), device(type='cpu')])
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Tuple, Union

import torch

__all__ = ["parse_device", "check_cpu_index", "cpu_replica_limit", "parse_replica_device",
           "parse_replica_devices", "local_device_text"]

#: The job, replica and task parts of a TF device name that mean "this process".
_LOCAL_PARTS = {"job": "localhost", "replica": "0", "task": "0"}


def local_device_text(device: Union[str, torch.device]) -> str:
    """A device name in torch's lower-case ``type[:index]`` form, from torch's or TF's spelling.

    TF's ``/device:`` prefix and its ``/job:localhost/replica:0/task:0``
    prefix are dropped (keeping the index); ``gpu`` becomes ``cuda``.

    Example:
        >>> local_device_text("/job:localhost/replica:0/task:0/device:CPU:1")
        'cpu:1'

    Raises:
        ValueError: a full name with another job, replica or task than ``localhost``, 0, 0.
    """
    text = str(device).strip().lower()
    if "/" in text.strip("/"):
        parts = [p for p in text.split("/") if p]
        for part in parts[:-1]:
            key, _, value = part.partition(":")
            if _LOCAL_PARTS.get(key) != value:
                raise ValueError(
                    f"device {str(device)!r} names {part!r}: a strategy takes this process's devices by their "
                    "local names ('/device:CPU:0', 'cuda:0', or '/job:localhost/replica:0/task:0/device:CPU:0'); "
                    "other tasks join through TF_CONFIG and MultiWorkerMirroredStrategy")
        text = parts[-1]
    text = text.lstrip("/")
    if text.startswith("device:"):
        text = text[len("device:"):]
    return text.replace("gpu", "cuda")


def parse_device(device: Union[str, torch.device]) -> torch.device:
    """Accept torch spellings and TF ones (``"/gpu:0"``, ``"/cpu:0"``, ``"GPU:1"``)."""
    text = local_device_text(device)
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


def parse_replica_device(spec: Any) -> Tuple[str, torch.device]:
    """``"cpu:1"`` (or ``"/device:CPU:1"``) -> (label "cpu:1", torch cpu); ``"/gpu:0"``/``"cuda:0"`` -> cuda:0."""
    text = local_device_text(spec)
    if text.startswith("cpu"):
        index = text.partition(":")[2]
        if index and not index.isdigit():
            raise ValueError(f"unknown device {spec!r}: CPU replicas are named 'cpu:0', 'cpu:1', ...")
        check_cpu_index(int(index) if index else None, spec)
        return (text if index else "cpu:0"), torch.device("cpu")
    dev = parse_device(spec)
    return str(dev), dev


def parse_replica_devices(specs: Sequence[Any]) -> Tuple[List[str], List[torch.device]]:
    """Labels and torch devices of a device list, e.g. ``["cpu:0", "cpu:1"]``."""
    parsed = [parse_replica_device(d) for d in specs]
    return [p[0] for p in parsed], [p[1] for p in parsed]
