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

from typing import Union

import torch

from distrib.strategies.base import ReplicatedStrategy
from distrib.strategies.devices import check_cpu_index, cpu_replica_limit, parse_device

__all__ = ["OneDeviceStrategy", "parse_device", "check_cpu_index", "cpu_replica_limit"]


class OneDeviceStrategy(ReplicatedStrategy):
    """A single replica on ``device`` ("cpu", "cuda:0", "/gpu:0", ...)."""

    def __init__(self, device: Union[str, torch.device]) -> None:
        super().__init__(device=parse_device(device))
