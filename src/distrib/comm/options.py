"""How replicas talk to each other: `CommunicationOptions` (the tf.distribute spelling).

Example:
    >>> opts = CommunicationOptions(implementation=CommunicationImplementation.RING,
    ...                             timeout_seconds=30)
    >>> opts.backend_for(torch.device("cpu"))
    'gloo'
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

import torch

__all__ = ["CommunicationImplementation", "CommunicationOptions", "DEFAULT_TIMEOUT_SECONDS"]

DEFAULT_TIMEOUT_SECONDS = 60.0


class CommunicationImplementation(enum.Enum):
    """Which collective library carries the traffic.

    RING is gloo (CPU tensors, any machine); NCCL is NCCL (CUDA tensors);
    AUTO picks NCCL for CUDA devices and gloo otherwise.
    """

    AUTO = "AUTO"
    RING = "RING"
    NCCL = "NCCL"


@dataclass(frozen=True)
class CommunicationOptions:
    """Options for the collectives a strategy runs.

    Args:
        implementation: see `CommunicationImplementation`.
        timeout_seconds: how long any task waits for a peer (rendezvous,
            collective) before failing with an error that names the missing
            task. ``None`` means `DEFAULT_TIMEOUT_SECONDS` (60 s).
        bucket_cap_mb: size of the flat gradient buckets reduced while the
            backward pass still runs (larger: fewer messages; smaller: more overlap).
        gradient_compression: ``None``, ``"bf16"`` or ``"fp16"``; gradients
            are cast for the wire and summed in that precision (opt-in; see bench/).
        sync_batch_norm: torch BatchNorm layers and Keras 3
            ``BatchNormalization`` layers in a multi-replica scope normalise
            with global-batch statistics in training (one small all-reduce per
            layer in forward and one in backward), so N replicas equal one
            process (`distrib.strategies.layer_patches.keras_global_layers` for Keras's).
            ``False``: local statistics, running statistics averaged after
            each step (tf.distribute's default).
        global_batch_dropout: torch Dropout layers (``Dropout``,
            ``Dropout1d/2d/3d``) in a multi-replica scope, and
            ``torch.nn.functional``'s dropout functions and
            ``scaled_dot_product_attention`` in a multi-replica step, decide
            each mask element from the example's place in the global batch,
            so the masks do not depend on how many replicas share it
            (`distrib.strategies.layer_patches.global_dropout`; the attention then runs
            unfused); so do Keras 3's dropout layers, seeded or not, and
            the noise of its ``GaussianNoise``, ``GaussianDropout`` and
            ``AlphaDropout`` (`distrib.strategies.layer_patches.keras_random`).
            ``False``: torch's and Keras's own dropout and noise (and fused
            attention kernels) on each replica's rows.
    """

    implementation: CommunicationImplementation = CommunicationImplementation.AUTO
    timeout_seconds: Optional[float] = None
    bucket_cap_mb: float = 25.0
    gradient_compression: Optional[str] = None
    sync_batch_norm: bool = True
    global_batch_dropout: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.implementation, CommunicationImplementation):
            raise ValueError(
                f"CommunicationOptions.implementation must be a CommunicationImplementation, "
                f"got {self.implementation!r}")
        if self.timeout_seconds is not None and not self.timeout_seconds > 0:
            raise ValueError(
                f"CommunicationOptions.timeout_seconds must be > 0, got {self.timeout_seconds!r}")
        if not self.bucket_cap_mb > 0:
            raise ValueError(f"CommunicationOptions.bucket_cap_mb must be > 0, got {self.bucket_cap_mb!r}")
        if self.gradient_compression not in (None, "bf16", "fp16"):
            raise ValueError(
                "CommunicationOptions.gradient_compression must be None, 'bf16' or 'fp16', "
                f"got {self.gradient_compression!r}")

    @property
    def timeout(self) -> float:
        return DEFAULT_TIMEOUT_SECONDS if self.timeout_seconds is None else float(self.timeout_seconds)

    def backend_for(self, device: torch.device) -> str:
        """The torch.distributed backend for tensors on ``device``."""
        if self.implementation is CommunicationImplementation.NCCL:
            return "nccl"
        if self.implementation is CommunicationImplementation.RING:
            return "gloo"
        return "nccl" if device.type == "cuda" else "gloo"
