"""Loss helpers with tf.nn's names: scale per-example losses to the global batch.

Under a strategy with N replicas each replica divides its per-example losses
by the GLOBAL batch size; since gradients are summed across replicas, the step
equals one process's step on the whole global batch.

`compute_average_loss` follows ``tf.nn.compute_average_loss`` exactly: every
element of the (weighted) loss is summed, whatever its rank, and the sum is
divided by the global batch size — so a per-example loss of shape
``[batch, 3]`` counts 3 terms per example (reduce it to ``[batch]`` first
for a per-example mean).

Example (2 replicas, per-replica batch 4, global batch 8):
    >>> per_example = torch.tensor([1.0, 2.0, 3.0, 2.0])
    >>> compute_average_loss(per_example)          # sum / 8 on each replica
    tensor(1.)
    >>> compute_average_loss(torch.arange(12.0).reshape(4, 3), global_batch_size=4)
    tensor(16.5000)
"""
from __future__ import annotations

from typing import Optional, Union

import torch

from distrib.errors import DistribError
from distrib.losses.reduction import divide_by_count
from distrib.strategies.context import get_replica_context, has_strategy, in_cross_replica_context
from distrib.strategies.default import get_strategy
from distrib.utils.public_names import public_dir

__all__ = ["compute_average_loss", "scale_regularization_loss", "CrossReplicaContextError"]


def __dir__() -> "list[str]":
    return public_dir(globals(), __all__)


class CrossReplicaContextError(DistribError, RuntimeError):
    """A replica-context helper was called outside `Strategy.run` under a strategy's scope."""


def compute_average_loss(per_example_loss: torch.Tensor,
                         sample_weight: Optional[Union[torch.Tensor, float]] = None,
                         global_batch_size: Optional[int] = None) -> torch.Tensor:
    """Sum of (weighted) per-example losses divided by the global batch size (``tf.nn`` semantics).

    Args:
        per_example_loss: rank >= 1, batch first; all elements are summed.
        sample_weight: a scalar, or per-example/per-element weights; a weight
            one rank lower than the loss gets a trailing axis, one rank higher
            loses its trailing size-1 axis, then it broadcasts (as TF does).
        global_batch_size: default: this replica's batch (the loss's first
            dimension) times `num_replicas_in_sync`; needs the replica context.

    Raises:
        ValueError: ``per_example_loss`` is a scalar, or ``global_batch_size``
            is not a positive integer.
        CrossReplicaContextError: called in a strategy's scope but outside
            `Strategy.run` without ``global_batch_size``.
    """
    loss = torch.as_tensor(per_example_loss)
    if loss.dim() == 0:
        raise ValueError(
            f"compute_average_loss: per_example_loss must have rank >= 1 (one value per example), got a scalar "
            f"({loss.item()!r}); pass the unreduced losses (loss reduction NONE), not their mean or sum")
    dtype = loss.dtype
    if sample_weight is not None:
        loss = _scale_by_sample_weight(loss, sample_weight).to(dtype)
    if global_batch_size is None:
        if has_strategy() and in_cross_replica_context():
            raise CrossReplicaContextError(
                "You are calling `compute_average_loss` in cross replica context, while it was expected to be "
                "called in replica context: call it inside the function given to strategy.run(), or pass "
                "global_batch_size=")
        global_batch_size = loss.shape[0] * _num_replicas()
        if global_batch_size == 0:  # every replica's part of the last batch is empty
            return loss.sum() * 0.0
    if isinstance(global_batch_size, torch.Tensor):
        if global_batch_size.dim() != 0 or global_batch_size.is_floating_point():
            raise ValueError(f"compute_average_loss: global_batch_size must be a scalar integer, "
                             f"got {global_batch_size!r}")
        global_batch_size = int(global_batch_size.item())
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int):
        raise ValueError(f"compute_average_loss: global_batch_size must be an integer, got {global_batch_size!r}")
    if global_batch_size <= 0:
        raise ValueError(f"compute_average_loss: global_batch_size must be positive, got {global_batch_size}")
    return divide_by_count(loss.sum(), global_batch_size)


def _scale_by_sample_weight(loss: torch.Tensor, sample_weight: Union[torch.Tensor, float]) -> torch.Tensor:
    """``loss * sample_weight`` in float32, ranks matched like TF's ``squeeze_or_expand_dimensions``."""
    w = torch.as_tensor(sample_weight, device=loss.device).to(torch.float32)
    values = loss.to(torch.float32)
    if w.dim() > 0 and w.dim() - values.dim() == 1 and w.shape[-1] == 1:
        w = w.squeeze(-1)
    elif w.dim() > 0 and values.dim() - w.dim() == 1:
        w = w.unsqueeze(-1)
    try:
        return values * w
    except RuntimeError:
        raise ValueError(
            f"compute_average_loss: sample_weight of shape {tuple(w.shape)} does not broadcast to "
            f"per_example_loss of shape {tuple(loss.shape)}; pass one weight per example or a scalar") from None


def scale_regularization_loss(regularization_loss: torch.Tensor) -> torch.Tensor:
    """Divide a model-wide loss (e.g. weight decay terms) by `num_replicas_in_sync`."""
    return regularization_loss / _num_replicas()


def _num_replicas() -> int:
    ctx = get_replica_context()
    return ctx.num_replicas_in_sync if ctx is not None else get_strategy().num_replicas_in_sync
