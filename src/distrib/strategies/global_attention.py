"""Global-batch attention dropout: ``scaled_dot_product_attention`` drops its weights by the example's global row.

With ``dropout_p > 0`` in a multi-replica step (``MultiheadAttention(need_weights=False)``,
``TransformerEncoderLayer`` and ``TransformerDecoderLayer`` in training) torch would draw the
mask inside a fused kernel; here the attention is computed with torch's math formula instead
(`_keyed_attention`: ``attn_mask``, ``is_causal``, ``scale`` and ``enable_gqa`` as torch
defines them, arguments checked by torch) and the weights ``(N, ..., L, S)`` are dropped by
`distrib.strategies.global_dropout` with the mask of each example's row ``N``. The cost: the
full ``L x S`` weights of every head are held (the fused kernels hold none), and the mask is
hashed per element. With ``dropout_p == 0`` (evaluation) or outside such a step, torch's
function runs, fused kernels and all. `global_dropout.install_functional_dropout` installs it.
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Callable, Optional, Tuple

import torch

from distrib.strategies import global_dropout
from distrib.strategies.global_dropout import replica_id_of, stepping_strategy

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["attention_maker"]

#: torch 2.5 added ``enable_gqa`` to ``scaled_dot_product_attention``.
_TORCH_HAS_GQA = torch.__version__ >= "2.5"


def attention_maker(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
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
    """Attention as torch's math kernel computes it, its weights dropped by `global_dropout._keyed_dropout`.

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
    """Keyed dropout of attention weights ``(N, ..., L, S)``: each example's ``(..., L, S)`` is its row.

    Unbatched weights ``(L, S)`` are one row.
    """
    if weights.dim() > 2:
        return global_dropout._keyed_dropout(weights, p, False, channels=False, replica_id=replica_id)
    row = global_dropout._keyed_dropout(weights.unsqueeze(0), p, False, channels=False, replica_id=replica_id)
    return row.squeeze(0)
