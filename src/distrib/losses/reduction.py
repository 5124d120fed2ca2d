"""`Reduction`: how a loss object turns per-example losses into what it returns.

The names and values follow Keras (``tf.keras.losses.Reduction`` and Keras 3's
strings), so ``reduction=distrib.losses.Reduction.NONE``, ``reduction="none"``
and ``reduction=None`` all mean "give me the per-example losses".

``SUM_OVER_BATCH_SIZE`` (and ``AUTO``, its alias) divides the weighted sum by
the number of loss *elements*, not by the sum of the sample weights, exactly
like Keras.

Example:
    >>> losses = torch.tensor([1.0, 2.0, 3.0, 6.0])
    >>> reduce_weighted(losses, torch.tensor([1.0, 1.0, 0.0, 0.0]), Reduction.SUM_OVER_BATCH_SIZE)
    tensor(0.7500)
    >>> reduce_weighted(losses, None, Reduction.SUM)
    tensor(12.)

Inside a distributed custom training loop use ``Reduction.NONE`` and
`distrib.nn.compute_average_loss`, which divides by the *global* batch size;
the local mean of ``SUM_OVER_BATCH_SIZE`` is not scaled for the number of
replicas.
"""
from __future__ import annotations

import contextlib
import enum
import threading
from typing import Any, Iterator, Optional

import torch

from distrib.errors import DistribError
from distrib.strategies.context import get_replica_context, is_default_strategy

__all__ = ["Reduction", "standardize_reduction", "reduce_weighted", "apply_sample_weight", "match_ranks",
           "LossReductionError", "check_distributed_reduction", "losses_scaled_by_model"]


class LossReductionError(DistribError, ValueError):
    """A loss that averages over the local batch was used in a replica function."""


class _ModelScaling(threading.local):
    depth = 0


_MODEL_SCALING = _ModelScaling()


@contextlib.contextmanager
def losses_scaled_by_model() -> Iterator[None]:
    """Inside: `distrib.Model`'s steps, which divide per-example losses by the global batch themselves."""
    _MODEL_SCALING.depth += 1
    try:
        yield
    finally:
        _MODEL_SCALING.depth -= 1


def check_distributed_reduction(loss_name: str, reduction: "Reduction") -> None:
    """Refuse ``AUTO``/``SUM_OVER_BATCH_SIZE`` inside `Strategy.run` (as tf.keras does).

    The local mean divides by the replica's batch, not the global one, so the
    summed gradients would be ``num_replicas_in_sync`` times too large.
    Allowed under the default strategy and inside `distrib.Model`'s own steps.

    Raises:
        LossReductionError: naming the loss and the fix.
    """
    if reduction not in (Reduction.AUTO, Reduction.SUM_OVER_BATCH_SIZE) or _MODEL_SCALING.depth:
        return
    ctx = get_replica_context()
    if ctx is None or is_default_strategy(ctx.strategy):
        return
    raise LossReductionError(
        f"loss {loss_name!r} with reduction={reduction.value!r} was called inside strategy.run() under "
        f"{type(ctx.strategy).__name__}: please use `distrib.losses.Reduction.SUM` or "
        "`distrib.losses.Reduction.NONE` for loss reduction when losses are used with a distribution strategy, "
        "and divide the per-example losses by the global batch size with `distrib.nn.compute_average_loss`; "
        "only losses given to `Model.compile()` for `Model.fit()` may keep the default reduction")


class Reduction(str, enum.Enum):
    """Keras loss reductions; members compare equal to Keras 3's strings."""

    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"
    AUTO = "auto"

    @classmethod
    def all(cls) -> tuple:
        return tuple(cls)

    @classmethod
    def validate(cls, key: Any) -> None:
        standardize_reduction(key)


def standardize_reduction(reduction: Any) -> Reduction:
    """``reduction`` as a `Reduction` member; ``None`` and ``"mean"`` are accepted like Keras 3."""
    if reduction is None:
        return Reduction.NONE
    if isinstance(reduction, Reduction):
        return reduction
    if isinstance(reduction, str):
        key = reduction.lower()
        if key == "mean":
            return Reduction.SUM_OVER_BATCH_SIZE
        for member in Reduction:
            if member.value == key:
                return member
    raise ValueError(
        f"reduction={reduction!r} is not a loss reduction; use one of "
        f"{[m.value for m in Reduction]} or distrib.losses.Reduction.<NAME>")


def match_ranks(a: torch.Tensor, b: torch.Tensor) -> tuple:
    """Squeeze or expand a trailing size-1 axis so ``a`` and ``b`` have the same rank.

    Mirrors Keras's ``squeeze_or_expand_to_same_rank``: labels ``[B]`` against
    predictions ``[B, 1]`` become ``[B, 1]``; anything else is left alone.
    """
    ra, rb = a.dim(), b.dim()
    if ra == rb + 1 and a.shape[-1] == 1:
        if rb == 1:
            b = b.unsqueeze(-1)
        else:
            a = a.squeeze(-1)
    elif rb == ra + 1 and b.shape[-1] == 1:
        if ra == 1:
            a = a.unsqueeze(-1)
        else:
            b = b.squeeze(-1)
    return a, b


def apply_sample_weight(values: torch.Tensor, sample_weight: Optional[Any]) -> torch.Tensor:
    """``values * sample_weight`` with Keras's rank matching and broadcasting."""
    if sample_weight is None:
        return values
    w = torch.as_tensor(sample_weight, device=values.device)
    w = w.to(values.dtype if values.is_floating_point() else torch.float32)
    v, w = match_ranks(values, w)
    if 0 < w.dim() < v.dim() and tuple(w.shape) == tuple(v.shape[:w.dim()]):
        w = w.reshape(tuple(w.shape) + (1,) * (v.dim() - w.dim()))
    try:
        return v * w
    except RuntimeError:
        raise ValueError(
            f"sample_weight of shape {tuple(w.shape)} does not broadcast to the losses "
            f"of shape {tuple(values.shape)}; pass one weight per example") from None


def reduce_weighted(values: torch.Tensor, sample_weight: Optional[Any], reduction: Any) -> torch.Tensor:
    """Weight ``values`` and reduce them as ``reduction`` says (see module docstring)."""
    red = standardize_reduction(reduction)
    weighted = apply_sample_weight(values, sample_weight)
    if red is Reduction.NONE or weighted.dim() == 0:
        return weighted
    total = weighted.sum()
    if red is Reduction.SUM:
        return total
    n = weighted.numel()
    return total / n if n else total
