"""The keyed hash behind global-batch dropout: a pure function of a key and each element's global index.

`keyed_bits` hashes element ``j`` of global row ``i`` (index ``i * per_row + j``)
with a two-word key, so a row's values are the same whichever replica holds
it and whichever rows are hashed with it; `keyed_keep_mask` thresholds them
into a dropout mask, `alpha_dropout_with` applies torch's alpha dropout with
such a mask, and `mix32` mixes keys made of other keys
(`distrib.strategies.layer_patches.global_dropout`, `distrib.strategies.layer_patches.keras_random`).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import torch

__all__ = ["mix32", "keyed_bits", "keyed_keep_mask", "alpha_dropout_with"]

_M32 = 0xFFFFFFFF
# Odd multipliers below 2**31 (the "lowbias32" hash's, top bit cleared): a product with a 32-bit
# value stays below 2**63, so int64 arithmetic never overflows, on any device.
_C1, _C2 = 0x7FEB352D, 0x046CA68B


def mix32(x: int) -> int:
    """`_mix32_` on one 32-bit value (a Python int): for keys made of other keys (Keras's seeds).

    Example:
        >>> mix32(0) == 0 and mix32(1) != 1
        True
    """
    x ^= x >> 16
    x = (x * _C1) & _M32
    x ^= x >> 15
    x = (x * _C2) & _M32
    return x ^ (x >> 16)


def _mix32_(x: torch.Tensor) -> torch.Tensor:
    """A bijection of 32-bit values (held in int64) that spreads every input bit over the output; overwrites ``x``.

    In place: the mask of a large attention is hashed with half the passes over memory.
    """
    x.bitwise_xor_(x >> 16)
    x.mul_(_C1).bitwise_and_(_M32)
    x.bitwise_xor_(x >> 15)
    x.mul_(_C2).bitwise_and_(_M32)
    return x.bitwise_xor_(x >> 16)


def keyed_bits(shape: Sequence[int], first_row: int, key: Tuple[int, int], salt: int = 0,
               device: Optional[torch.device] = None) -> torch.Tensor:
    """32-bit hash values (int64) of ``shape`` (rows first) for global rows ``first_row ..``, a pure function.

    Element ``j`` of global row ``i`` hashes its global index ``i * per_row + j``
    (``per_row = prod(shape[1:])``) with ``key`` (and ``salt``), so a row's
    values do not depend on which rows are hashed with it. `keyed_keep_mask`
    thresholds them; `keras_random` makes uniform and normal draws of them.

    Args:
        shape: the result's shape; ``shape[0]`` rows of ``prod(shape[1:])`` elements.
        first_row: the global row of the first row.
        key: two 32-bit words (drawn once per call).
        salt: 0 where rows are global; else a replica's own stream (replica id + 1).
    """
    per_row = 1
    for d in shape[1:]:
        per_row *= int(d)
    rows = int(shape[0]) if len(shape) else 1
    start = first_row * per_row
    index = torch.arange(start, start + rows * per_row, dtype=torch.int64, device=device)
    wide = start + rows * per_row > 2 ** 32
    low = (index & _M32) if wide else index
    h = _mix32_(low.bitwise_xor_(key[0]))
    if wide:
        h.bitwise_xor_(index >> 32)
    h = _mix32_(h.bitwise_xor_(key[1]))
    if salt:
        h = _mix32_(h.bitwise_xor_(salt & _M32))
    return h.reshape(tuple(shape))


def keyed_keep_mask(shape: Sequence[int], first_row: int, p: float, key: Tuple[int, int], salt: int = 0,
                    device: Optional[torch.device] = None) -> torch.Tensor:
    """Boolean keep-mask of ``shape`` (rows first) for global rows ``first_row ..``, a pure function of its inputs.

    An element is kept where its `keyed_bits` value is at least ``p * 2**32``.

    Args:
        shape: the mask's shape; ``shape[0]`` rows of ``prod(shape[1:])`` elements.
        first_row: the global row of the mask's first row.
        p: the probability of dropping an element.
        key: two 32-bit words (drawn once per call).
        salt: 0 where rows are global; else a replica's own stream (replica id + 1).
    """
    threshold = min(int(round(p * 2.0 ** 32)), 2 ** 32)
    return keyed_bits(shape, first_row, key, salt=salt, device=device) >= threshold


#: SELU's ``scale * alpha``: where alpha dropout sends a dropped unit (before its affine correction).
_SELU_ALPHA = 1.7580993408473766


def alpha_dropout_with(x: torch.Tensor, keep: torch.Tensor, p: float, inplace: bool = False) -> torch.Tensor:
    """torch's alpha dropout of ``x`` with the keep-mask ``keep`` (broadcast to ``x``), operation for operation.

    A kept unit becomes ``a·x + α·a·p`` and a dropped one ``α·a·(p - 1)``, with
    ``α`` SELU's ``scale·alpha`` and ``a = ((α²·p + 1)(1 - p))^-1/2``, so a
    SELU network's mean and variance are kept. The same operations in the same
    order as torch's, so the same mask gives the same bits.

    Example (p = 0.5; a kept 1.0 and a dropped unit):
        >>> y = alpha_dropout_with(torch.tensor([1.0, 1.0]), torch.tensor([True, False]), 0.5)
        >>> [round(v, 4) for v in y.tolist()]
        [1.3447, -0.7785]
    """
    a = 1.0 / math.sqrt((_SELU_ALPHA * _SELU_ALPHA * p + 1) * (1 - p))
    noise = keep.to(x.dtype)
    shift = noise.add(-1).mul_(_SELU_ALPHA * a).add_(_SELU_ALPHA * a * p)
    noise.mul_(a)
    return (x.mul_(noise) if inplace else x * noise).add_(shift)
