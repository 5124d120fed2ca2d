"""Global-batch dropout: a torch Dropout layer in a multi-replica scope drops by the example's global place.

torch's dropout draws a mask of its input's shape from the process's
generator, so which units of an example are dropped depends on how many rows
its replica holds and where the example sits among them: a job split over 2
replicas drops other units than the same job split over 3, and an elastic job
that changes size mid-run would stop matching the fixed-size run. Replicas
seeded alike even draw the *same* mask for row ``i`` of every replica.

In a scope with more than one replica, ``torch.nn.Dropout``, ``Dropout1d``,
``Dropout2d`` and ``Dropout3d`` layers instead draw each call's key (two
32-bit words) from the process's generator and decide every mask element with
a keyed hash of its *global* index: the example's row in the global batch (its
replica's `batch_position.RowPosition` plus its local row) times the mask's
elements per row, plus its place in the row. The mask of global row ``i`` is
therefore the same whichever replica holds it, every replica draws the same
key (the generators advance by one draw per call on every replica, so seeded
replicas stay in step), and distinct rows get independent masks. Each element
is kept with probability ``1 - p`` (to 2**-32) and scaled by ``1 / (1 - p)``,
as torch does. Recomputation under ``torch.utils.checkpoint`` restores the
generator, so it draws the same key, finds the place the first computation
had, and makes the same mask.

The same holds for ``torch.nn.functional.dropout``, ``dropout1d/2d/3d``,
``alpha_dropout`` and ``feature_alpha_dropout`` (so ``nn.AlphaDropout`` and
``nn.FeatureAlphaDropout``: `alpha_dropout_with`) called in a multi-replica step (inside ``strategy.run`` or a scope whose
strategy has more than one replica; `install_functional_dropout`), so a
``forward`` that calls ``F.dropout(x, p, self.training)`` and the attention
dropout of ``torch.nn.MultiheadAttention`` (computed with its weights, the
default ``need_weights=True``) keep their masks when the job changes size. A
tensor whose first dimension is ``k`` times the replica's rows is taken as
``k`` rows per example, example-major (attention weights of shape
``(batch * heads, target, source)``). Keras 3's ``Dropout`` without a seed
calls ``torch.nn.functional.dropout`` on the torch backend, so it is covered
too.

``torch.nn.functional.scaled_dot_product_attention`` with ``dropout_p > 0`` in
a multi-replica step drops its weights by the example's row too
(`distrib.strategies.global_attention`).

When the batch's global place is unknown (a per-worker input: FILE sharding,
a dataset function; an input not from a distributed dataset) the key is also
salted with the replica id, so replicas still drop independently.
``CommunicationOptions(global_batch_dropout=False)`` keeps torch's own dropout.

Example (global batch of 6 rows, p = 0.5): replica 0 of 2 holds rows 0..2 and
replica 1 rows 3..5; split 3 ways, replica 1 holds rows 2..3. Row 3 gets the
same mask in both jobs:
    >>> m = keyed_keep_mask((6, 4), first_row=0, p=0.5, key=(7, 9))
    >>> torch.equal(keyed_keep_mask((3, 4), 3, 0.5, (7, 9)), m[3:])
    True
"""
from __future__ import annotations

import collections
import math
import types
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Tuple

import torch

from distrib import hooks
from distrib.data import batch_position
from distrib.strategies import context

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["use_global_batch_dropout", "uses_global_batch_dropout", "keyed_keep_mask", "keyed_bits",
           "install_functional_dropout", "mix32", "alpha_dropout_with",
           "stepping_strategy", "replica_id_of"]

_MARK = "_distrib_global_batch_dropout"
_M32 = 0xFFFFFFFF
# Odd multipliers below 2**31 (the "lowbias32" hash's, top bit cleared): a product with a 32-bit
# value stays below 2**63, so int64 arithmetic never overflows, on any device.
_C1, _C2 = 0x7FEB352D, 0x046CA68B

#: Channel dropout: the input's batched rank; the mask covers (rows, channels).
_CHANNEL_RANK = {torch.nn.Dropout1d: 3, torch.nn.Dropout2d: 4, torch.nn.Dropout3d: 5}


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


def uses_global_batch_dropout(module: torch.nn.Module) -> bool:
    """True if `use_global_batch_dropout` switched ``module``."""
    return bool(module.__dict__.get(_MARK, False))


def use_global_batch_dropout(module: torch.nn.Module, strategy_of: Callable[[], Optional["Strategy"]]) -> bool:
    """Make a torch Dropout layer drop by each example's global place; False if not one (idempotent).

    Args:
        module: any module; ``Dropout`` and ``Dropout1d/2d/3d`` are changed
            (``AlphaDropout`` and ``FeatureAlphaDropout`` need not be: they call
            the functions `install_functional_dropout` replaces).
        strategy_of: returns the strategy whose replicas share the batch, or
            None (a weak reference, so the layer keeps no strategy alive).
    """
    if type(module) not in (torch.nn.Dropout, *_CHANNEL_RANK) or uses_global_batch_dropout(module):
        return False
    module.__dict__[_MARK] = True
    module.forward = types.MethodType(_make_forward(strategy_of), module)  # type: ignore[method-assign]
    return True


def _make_forward(strategy_of: Callable[[], Optional["Strategy"]]) -> Callable[..., torch.Tensor]:
    def forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        strategy = strategy_of()
        rank = _CHANNEL_RANK.get(type(self))
        if (strategy is None or not strategy.multi_replica or not self.training or self.p == 0.0
                or x.dim() == 0 or (rank is not None and x.dim() != rank)):
            return type(self).forward(self, x)
        return _keyed_dropout(x, float(self.p), bool(self.inplace), channels=rank is not None,
                              replica_id=replica_id_of(strategy))
    return forward


def install_functional_dropout() -> None:
    """Make ``torch.nn.functional``'s dropout functions and ``scaled_dot_product_attention`` drop by the global
    row in multi-replica steps (idempotent)."""
    from distrib.strategies.global_attention import attention_maker  # it builds on this module

    for name, make in _FUNCTIONAL_MAKERS.items():
        hooks.functional_override(name, make)
    hooks.functional_override("scaled_dot_product_attention", attention_maker)


def _functional_maker(rank: Optional[int]) -> Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]:
    def make(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def dropout(input: torch.Tensor, p: float = 0.5, training: bool = True,
                    inplace: bool = False) -> torch.Tensor:
            if not torch.jit.is_scripting():  # TorchScript compiles torch's own function only
                keyed = _keyed_if_stepping(input, p, training, inplace, rank)
                if keyed is not None:
                    return keyed
            return original(input, p, training, inplace)
        dropout.__doc__ = original.__doc__
        return dropout
    return make


def _keyed_if_stepping(x: torch.Tensor, p: float, training: bool, inplace: bool,
                       rank: Optional[int]) -> Optional[torch.Tensor]:
    """The keyed dropout of ``x`` in a multi-replica step; None where torch's own applies."""
    strategy = stepping_strategy()
    if (strategy is None or not training or type(x) is not torch.Tensor or not 0.0 < p <= 1.0
            or x.dim() == 0 or (rank is not None and x.dim() != rank)):
        return None
    return _keyed_dropout(x, float(p), bool(inplace), channels=rank is not None, replica_id=replica_id_of(strategy))


def _alpha_maker(channels: bool) -> Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]:
    """``alpha_dropout`` (``channels``: ``feature_alpha_dropout``, a mask per row and channel) keyed by the row."""
    def make(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def alpha_dropout(input: torch.Tensor, p: float = 0.5, training: bool = False,
                          inplace: bool = False) -> torch.Tensor:
            if not torch.jit.is_scripting():  # TorchScript compiles torch's own function only
                strategy = stepping_strategy()
                if (strategy is not None and training and type(input) is torch.Tensor and 0.0 < p <= 1.0
                        and input.numel() > 0 and input.dim() >= (2 if channels else 1)):
                    return _keyed_dropout(input, float(p), bool(inplace), channels=channels,
                                          replica_id=replica_id_of(strategy), alpha=True)
            return original(input, p, training, inplace)
        alpha_dropout.__doc__ = original.__doc__
        return alpha_dropout
    return make


#: ``torch.nn.functional``'s dropout functions: plain and channel (with the batched rank of the
#: input), and alpha (``nn.AlphaDropout`` and ``nn.FeatureAlphaDropout`` call these too).
_FUNCTIONAL_MAKERS = {**{name: _functional_maker(rank)
                         for name, rank in (("dropout", None), ("dropout1d", 3), ("dropout2d", 4), ("dropout3d", 5))},
                      "alpha_dropout": _alpha_maker(channels=False),
                      "feature_alpha_dropout": _alpha_maker(channels=True)}


def stepping_strategy() -> Optional["Strategy"]:
    """The multi-replica strategy whose step (or scope) is running here and drops globally; else None."""
    ctx = context.get_replica_context()
    strategy = ctx.strategy if ctx is not None else context.current_scope_strategy()
    if strategy is None or not strategy.multi_replica:
        return None
    options = getattr(strategy, "communication_options", None)
    return strategy if options is not None and getattr(options, "global_batch_dropout", False) else None


def replica_id_of(strategy: "Strategy") -> int:
    """The running replica's id: the step's replica context's, else the strategy's own."""
    ctx = context.get_replica_context()
    return int(ctx.replica_id_in_sync_group) if ctx is not None else int(strategy.replica_id)


def _keyed_dropout(x: torch.Tensor, p: float, inplace: bool, channels: bool, replica_id: int,
                   alpha: bool = False) -> torch.Tensor:
    words = torch.randint(0, 2 ** 32, (2,), dtype=torch.int64).tolist()  # one draw per call on every replica
    if p >= 1.0:
        return x.mul_(0.0) if inplace else x * 0.0
    first_row, salt = _place(words[0], words[1], int(x.shape[0]), replica_id)
    shape = tuple(x.shape[:2]) + (1,) * (x.dim() - 2) if channels else tuple(x.shape)
    keep = keyed_keep_mask(shape, first_row, p, (words[0], words[1]), salt=salt, device=x.device)
    if alpha:
        return alpha_dropout_with(x, keep, p, inplace)
    scale = keep.to(x.dtype).mul_(1.0 / (1.0 - p))
    return x.mul_(scale) if inplace else x * scale


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


_placed: "collections.OrderedDict[Tuple[int, int, int], Tuple[int, int]]" = collections.OrderedDict()
_PLACED_KEPT = 4096


def _place(w0: int, w1: int, rows: int, replica_id: int) -> Tuple[int, int]:
    """``(first global row, salt)`` for a call that drew key ``(w0, w1)`` on ``rows`` rows.

    ``rows`` that are ``k`` times the replica's rows are ``k`` per example
    (attention weights: ``batch * heads``), so its global rows start at ``k``
    times the replica's first row.

    A forward recomputed in the backward pass (activation checkpointing)
    restores the generator, so it draws the same key again: it gets the
    place its first computation had, whatever batch is current by then.
    """
    entry = (w0, w1, rows)
    place = _placed.get(entry)
    if place is None:
        position = batch_position.current()
        per_example = rows // position.rows if position is not None and position.rows > 0 else 0
        known = per_example > 0 and rows == per_example * position.rows  # type: ignore[union-attr]
        place = (position.first_row * per_example, 0) if known else (0, replica_id + 1)  # type: ignore[union-attr]
        _placed[entry] = place
        if len(_placed) > _PLACED_KEPT:
            _placed.popitem(last=False)
    return place
