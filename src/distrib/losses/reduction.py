"""`Reduction`: how a loss object turns per-example losses into what it returns.

The names and values follow Keras (``tf.keras.losses.Reduction`` and Keras 3's
strings), so ``reduction=distrib.losses.Reduction.NONE``, ``reduction="none"``
and ``reduction=None`` all mean "give me the per-example losses".

``SUM_OVER_BATCH_SIZE`` (and ``MEAN`` and ``AUTO``, its aliases) divides the
weighted sum by the number of loss *elements*, not by the sum of the sample
weights, exactly like Keras; ``MEAN_WITH_SAMPLE_WEIGHT`` divides by the sum
of the sample weights. A loss that is already a scalar (Keras's losses on
rank-1 ``[B]`` inputs average the whole batch in their last-axis mean) is
returned as it is, whatever the reduction, again like Keras.

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

import enum
import threading
from typing import Any, Optional

import torch

from distrib.errors import DistribError
from distrib.strategies.context import get_replica_context, is_default_strategy

__all__ = ["Reduction", "standardize_reduction", "reduce_weighted", "divide_by_count", "apply_sample_weight",
           "match_ranks", "LossReductionError", "check_distributed_reduction", "losses_scaled_by_model", "MEAN_REDUCTIONS"]


class LossReductionError(DistribError, ValueError):
    """A loss that averages over the local batch was used in a replica function."""


class _ModelScaling(threading.local):
    depth = 0


_MODEL_SCALING = _ModelScaling()


class _ScaledByModel:
    """The context manager `losses_scaled_by_model` returns (a class: it is entered every step)."""

    __slots__ = ()

    def __enter__(self) -> None:
        _MODEL_SCALING.depth += 1

    def __exit__(self, *exc: Any) -> None:
        _MODEL_SCALING.depth -= 1


_SCALED_BY_MODEL = _ScaledByModel()


def losses_scaled_by_model() -> _ScaledByModel:
    """Inside: `distrib.Model`'s steps, which divide per-example losses by the global batch themselves."""
    return _SCALED_BY_MODEL


def check_distributed_reduction(loss_name: str, reduction: "Reduction") -> None:
    """Refuse the local-mean reductions (``AUTO``, ``SUM_OVER_BATCH_SIZE``, ``MEAN``,
    ``MEAN_WITH_SAMPLE_WEIGHT``) inside `Strategy.run` (as tf.keras 2 does).

    The local mean divides by the replica's batch, not the global one, so the
    summed gradients would be ``num_replicas_in_sync`` times too large.
    Allowed under the default strategy and inside `distrib.Model`'s own steps.

    Raises:
        LossReductionError: naming the loss and the fix.
    """
    if (reduction not in MEAN_REDUCTIONS and reduction is not Reduction.MEAN_WITH_SAMPLE_WEIGHT) or \
            _MODEL_SCALING.depth:
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
    """Keras loss reductions; members compare equal to Keras 3's strings (``None`` means ``NONE``)."""

    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"
    MEAN = "mean"
    MEAN_WITH_SAMPLE_WEIGHT = "mean_with_sample_weight"
    AUTO = "auto"

    @classmethod
    def all(cls) -> tuple:
        return tuple(cls)

    @classmethod
    def validate(cls, key: Any) -> None:
        standardize_reduction(key)


#: The reductions that divide by the number of loss elements (a local mean under a strategy).
MEAN_REDUCTIONS = (Reduction.AUTO, Reduction.SUM_OVER_BATCH_SIZE, Reduction.MEAN)


def standardize_reduction(reduction: Any) -> Reduction:
    """``reduction`` as a `Reduction` member; ``None`` means ``NONE`` like Keras 3."""
    if reduction is None:
        return Reduction.NONE
    if isinstance(reduction, Reduction):
        return reduction
    if isinstance(reduction, str):
        key = reduction.lower()
        for member in Reduction:
            if member.value == key:
                return member
    raise ValueError(
        f"reduction={reduction!r} is not a loss reduction; use one of "
        f"{[m.value for m in Reduction]}, None, or distrib.losses.Reduction.<NAME>")


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


def _weights(sample_weight: Any, like: torch.Tensor) -> torch.Tensor:
    w = torch.as_tensor(sample_weight, device=like.device)
    return w.to(like.dtype if like.is_floating_point() else torch.float32)


def apply_sample_weight(values: torch.Tensor, sample_weight: Optional[Any]) -> torch.Tensor:
    """``values * sample_weight`` with Keras's rank matching and broadcasting.

    One weight per example (``[B]``) against losses with further axes
    (``[B, T]``) weighs every element of the example; Keras would try to
    broadcast ``[B]`` against the *last* axis and fail.
    """
    if sample_weight is None:
        return values
    return _weighted(values, _weights(sample_weight, values))[0]


def _weighted(values: torch.Tensor, w: torch.Tensor) -> tuple:
    v, w = match_ranks(values, w)
    if 0 < w.dim() < v.dim() and tuple(w.shape) == tuple(v.shape[:w.dim()]):
        w = w.reshape(tuple(w.shape) + (1,) * (v.dim() - w.dim()))
    try:
        return v * w, w
    except RuntimeError:
        raise ValueError(
            f"sample_weight of shape {tuple(w.shape)} does not broadcast to the losses "
            f"of shape {tuple(values.shape)}; pass one weight per example") from None


def _mask_weights(mask: torch.Tensor, reduction: Reduction, dtype: torch.dtype) -> torch.Tensor:
    fmask = mask.to(dtype)
    if reduction in MEAN_REDUCTIONS:
        valid = fmask.sum()
        scale = torch.where(valid != 0, mask.numel() / torch.where(valid != 0, valid, 1.0), 0.0)
        fmask = fmask * scale
    return fmask


#: Dtypes in which a count up to `_MAX_EXACT_COUNT` is exact, so dividing by the Python number rounds as
#: dividing by the count cast to the dtype does (on the CPU, which divides by a scalar; a CUDA kernel
#: multiplies by its reciprocal instead, which may round differently).
_EXACT_COUNT_DTYPES = (torch.float32, torch.float64)
_MAX_EXACT_COUNT = 1 << 24


def divide_by_count(total: torch.Tensor, count: int) -> torch.Tensor:
    """``total / count`` rounded as a division by ``count`` cast to ``total``'s dtype (Keras's
    ``sum / cast(count, dtype)``), with no host-to-device copy and no extra kernel where that is exact.

    Example:
        >>> divide_by_count(torch.tensor(3.0), 4)
        tensor(0.7500)
    """
    if total.device.type == "cpu" and total.dtype in _EXACT_COUNT_DTYPES and 0 < count <= _MAX_EXACT_COUNT:
        return total / count
    return total / torch.full((), float(count), dtype=total.dtype, device=total.device)


def reduce_weighted(values: torch.Tensor, sample_weight: Optional[Any], reduction: Any,
                    mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Weight ``values`` and reduce them as ``reduction`` says (Keras's ``reduce_weighted_values``).

    ``mask`` (bool, shaped like ``values``) marks the valid elements: with a
    mean reduction the result is the weighted sum over valid elements divided
    by their number.
    """
    red = standardize_reduction(reduction)
    w: Optional[torch.Tensor] = None
    if mask is not None:
        w = _mask_weights(mask, red, values.dtype)
        if sample_weight is not None:
            w, sw = match_ranks(w, _weights(sample_weight, values))
            w = _weighted(w, sw)[0]
    elif sample_weight is not None:
        w = _weights(sample_weight, values)
    if w is not None:
        values, w = _weighted(values, w)
    if red is Reduction.NONE or values.dim() == 0 or tuple(values.shape) == (0,):
        return values
    total = values.sum()
    if red is Reduction.SUM:
        return total
    if red is Reduction.MEAN_WITH_SAMPLE_WEIGHT and w is not None:
        divisor = w.sum()
    elif values.numel() > 0:
        return divide_by_count(total, values.numel())
    else:
        return total * 0.0
    return torch.where(divisor != 0, total / torch.where(divisor != 0, divisor, 1.0), 0.0)
