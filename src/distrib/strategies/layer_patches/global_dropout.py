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
a multi-replica step (``MultiheadAttention(need_weights=False)``,
``TransformerEncoderLayer`` and ``TransformerDecoderLayer`` in training) would
draw its mask inside a fused kernel; there it computes the attention with
torch's math formula instead (`_keyed_attention`: ``attn_mask``, ``is_causal``,
``scale`` and ``enable_gqa`` as torch defines them, arguments checked by
torch) and drops the weights ``(N, ..., L, S)`` with the mask of each
example's row ``N``. The cost: the full ``L x S`` weights of every head are
held (the fused kernels hold none), and the mask is hashed per element. With
``dropout_p == 0`` (evaluation) or outside such a step, torch's function runs,
fused kernels and all.

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
import functools
import math
import types
from typing import TYPE_CHECKING, Callable, Optional, Tuple

import torch

from distrib import hooks
from distrib.data.distribution import batch_position
from distrib.strategies import context
from distrib.strategies.layer_patches.keyed_hash import alpha_dropout_with, keyed_bits, keyed_keep_mask, mix32

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["use_global_batch_dropout", "uses_global_batch_dropout", "keyed_keep_mask", "keyed_bits",
           "install_functional_dropout", "mix32", "alpha_dropout_with",
           "stepping_strategy", "replica_id_of", "global_place"]

_MARK = "_distrib_global_batch_dropout"
#: torch 2.5 added ``enable_gqa`` to ``scaled_dot_product_attention``.
_TORCH_HAS_GQA = torch.__version__ >= "2.5"

#: Channel dropout: the input's batched rank; the mask covers (rows, channels).
_CHANNEL_RANK = {torch.nn.Dropout1d: 3, torch.nn.Dropout2d: 4, torch.nn.Dropout3d: 5}


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
    for name, make in _FUNCTIONAL_MAKERS.items():
        hooks.functional_override(name, make)
    hooks.functional_override("scaled_dot_product_attention", _attention_maker)


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
    options = strategy.communication_options
    return strategy if options is not None and options.global_batch_dropout else None


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


_placed: "collections.OrderedDict[Tuple[int, int, int], Tuple[int, int]]" = collections.OrderedDict()
_PLACED_KEPT = 4096


def global_place(rows: int, replica_id: int) -> Tuple[int, int]:
    """``(first global row, salt)`` of a draw over ``rows`` rows, from the batch's noted place: the layer
    patches' one rule (`_place` here, `distrib.strategies.layer_patches.keras_random`).

    ``rows`` that are ``k`` times the replica's rows are ``k`` per example
    (attention weights: ``batch * heads``; ``TimeDistributed``), so the global
    rows start at ``k`` times the replica's first row, unsalted. Where the
    place is unknown, or ``rows`` is not such a multiple, the draw starts at
    row 0 salted with the replica id, so replicas still draw independently.

    Example (6 rows over 3 replicas, replica 1 holds global rows 2 and 3):
        ``rows=2`` -> ``(2, 0)``; ``rows=4`` -> ``(4, 0)``; ``rows=3`` -> ``(0, 2)``.
    """
    position = batch_position.current()
    if position is not None and position.rows > 0 and rows > 0 and rows % position.rows == 0:
        return position.first_row * (rows // position.rows), 0
    return 0, replica_id + 1


def _place(w0: int, w1: int, rows: int, replica_id: int) -> Tuple[int, int]:
    """`global_place` for a call that drew key ``(w0, w1)`` on ``rows`` rows, remembered by key.

    A forward recomputed in the backward pass (activation checkpointing)
    restores the generator, so it draws the same key again: it gets the
    place its first computation had, whatever batch is current by then.
    """
    entry = (w0, w1, rows)
    place = _placed.get(entry)
    if place is None:
        place = _placed[entry] = global_place(rows, replica_id)
        if len(_placed) > _PLACED_KEPT:
            _placed.popitem(last=False)
    return place


# ---------------------------------------------------------------- attention
def _attention_maker(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``scaled_dot_product_attention`` that, in a multi-replica step with ``dropout_p > 0``, drops by the row.

    There it computes the attention as torch's math kernel does (`_keyed_attention`) after torch checks the
    arguments (`_torch_validator`); everywhere else it is torch's function, fused kernels included.
    TorchScript compiles no keyword-only arguments, so ``scale`` and ``enable_gqa`` may also come by
    position here (torch's own takes them by keyword only). Before torch 2.5, which has no ``enable_gqa``,
    the replacement has none either (TorchScript compiles its call of torch's function).
    """
    validate = _torch_validator(original)

    def keyed_or_none(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Optional[torch.Tensor],
                      dropout_p: float, is_causal: bool, scale: Optional[float],
                      enable_gqa: bool) -> Optional[torch.Tensor]:
        strategy = _attention_strategy(query, key, value, attn_mask, dropout_p)
        if strategy is None:
            return None
        validate(_signature(query, key, value, attn_mask), is_causal, scale, enable_gqa)
        return _keyed_attention(query, key, value, attn_mask, float(dropout_p), is_causal, scale,
                                enable_gqa, replica_id_of(strategy))

    def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                     attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                                     is_causal: bool = False, scale: Optional[float] = None,
                                     enable_gqa: bool = False) -> torch.Tensor:
        if not torch.jit.is_scripting():  # TorchScript compiles torch's own function only
            keyed = keyed_or_none(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
            if keyed is not None:
                return keyed
        return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)

    def scaled_dot_product_attention_before_gqa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                                attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                                                is_causal: bool = False,
                                                scale: Optional[float] = None) -> torch.Tensor:
        if not torch.jit.is_scripting():
            keyed = keyed_or_none(query, key, value, attn_mask, dropout_p, is_causal, scale, False)
            if keyed is not None:
                return keyed
        return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale)

    chosen = scaled_dot_product_attention if _TORCH_HAS_GQA else scaled_dot_product_attention_before_gqa
    chosen.__name__ = chosen.__qualname__ = "scaled_dot_product_attention"
    chosen.__doc__ = original.__doc__
    return chosen


def _attention_strategy(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attn_mask: Optional[torch.Tensor], dropout_p: float) -> Optional["Strategy"]:
    """The multi-replica strategy whose step drops this attention's weights by the row; None: torch's own runs.

    Nested tensors and tensor subclasses keep torch's function, as a ``dropout_p`` outside ``(0, 1]`` does
    (torch raises for it).
    """
    if not isinstance(dropout_p, (int, float)) or not 0.0 < dropout_p <= 1.0:
        return None
    tensors = (query, key, value) if attn_mask is None else (query, key, value, attn_mask)
    if any(type(t) is not torch.Tensor or t.is_nested for t in tensors):
        return None
    return stepping_strategy()


_Signature = Tuple[Optional[Tuple[Tuple[int, ...], torch.dtype]], ...]


def _signature(*tensors: Optional[torch.Tensor]) -> _Signature:
    """What torch's argument checks read of each tensor: its shape and dtype."""
    return tuple(None if t is None else (tuple(t.shape), t.dtype) for t in tensors)


def _torch_validator(original: Callable[..., torch.Tensor]) -> Callable[..., None]:
    """Raise as torch's ``scaled_dot_product_attention`` would for these shapes, dtypes and flags.

    Runs torch's function on meta tensors (no data, no random draw): about 2 ms,
    so each accepted signature is remembered; a rejected one raises every time.
    """
    @functools.lru_cache(maxsize=256)
    def validate(signature: _Signature, is_causal: bool, scale: Optional[float], enable_gqa: bool) -> None:
        metas = [None if s is None else torch.empty(s[0], dtype=s[1], device="meta") for s in signature]
        gqa = {"enable_gqa": enable_gqa} if _TORCH_HAS_GQA else {}
        original(*metas, 0.0, is_causal, scale=scale, **gqa)
    return validate


def _keyed_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Optional[torch.Tensor],
                     p: float, is_causal: bool, scale: Optional[float], enable_gqa: bool,
                     replica_id: int) -> torch.Tensor:
    """Attention as torch's math kernel computes it, its weights dropped by `_keyed_dropout`.

    ``softmax(query @ key^T * scale + bias) @ value``, with ``scale`` by default
    ``1 / sqrt(E)``, the bias from ``attn_mask`` and ``is_causal``
    (`_attention_bias`), and with ``enable_gqa`` each key/value head shared by
    ``Hq / H`` consecutive query heads. Half and bfloat16 inputs are computed
    in float32 and the result cast back, as torch's math kernel does.
    """
    dtype = query.dtype
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    query, key, value = query.to(work), key.to(work), value.to(work)
    if enable_gqa and query.dim() >= 3 and key.size(-3) != query.size(-3):
        key = key.repeat_interleave(query.size(-3) // key.size(-3), -3)
        value = value.repeat_interleave(query.size(-3) // value.size(-3), -3)
    factor = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * factor
    bias = _attention_bias(attn_mask, is_causal, query.size(-2), key.size(-2), work, query.device)
    weights = torch.softmax(scores, -1) if bias is None else _safe_softmax(scores + bias)
    weights = _dropped_by_example(weights, p, replica_id)
    return (weights @ value).to(dtype)


def _attention_bias(attn_mask: Optional[torch.Tensor], is_causal: bool, target: int, source: int,
                    dtype: torch.dtype, device: torch.device) -> Optional[torch.Tensor]:
    """The float bias added to the scores: ``-inf`` where a boolean mask (or the causal mask) is False.

    The causal mask is upper-left aligned, as torch's: query ``i`` sees keys ``0..i``
    whatever the lengths (``target=2, source=3``: ``[[0, -inf, -inf], [0, 0, -inf]]``).
    A float ``attn_mask`` is added as it is.
    """
    if is_causal:
        attn_mask = torch.ones(target, source, dtype=torch.bool, device=device).tril()
    if attn_mask is None:
        return None
    if attn_mask.dtype == torch.bool:
        return torch.zeros(attn_mask.shape, dtype=dtype, device=device).masked_fill_(~attn_mask, float("-inf"))
    return attn_mask.to(dtype)


def _safe_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension; a row masked whole (all ``-inf``) gets weights 0, as torch's math kernel.

    The row's scores are set to 0 before the softmax so that neither its weights
    nor its gradient are NaN.
    """
    masked = scores.amax(-1, keepdim=True).isneginf()
    return torch.softmax(scores.masked_fill(masked, 0.0), -1).masked_fill(masked, 0.0)


def _dropped_by_example(weights: torch.Tensor, p: float, replica_id: int) -> torch.Tensor:
    """`_keyed_dropout` on attention weights ``(N, ..., L, S)``: each example's ``(..., L, S)`` is its row.

    Unbatched weights ``(L, S)`` are one row.
    """
    if weights.dim() > 2:
        return _keyed_dropout(weights, p, False, channels=False, replica_id=replica_id)
    return _keyed_dropout(weights.unsqueeze(0), p, False, channels=False, replica_id=replica_id).squeeze(0)
