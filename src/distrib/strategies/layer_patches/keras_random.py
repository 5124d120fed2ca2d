"""Keras's random draws made global-batch: seeded dropout and the noise layers draw by each element's global row.

In a multi-replica step, Keras 3's torch-backend ``dropout`` (when it draws from a seed) and the
``normal`` / ``uniform`` draws of ``GaussianNoise``, ``GaussianDropout`` and ``AlphaDropout`` take
their seed as Keras does, hash it into a key and return values that are a pure function of that key
and each element's global row (`global_dropout.keyed_bits`), so they do not depend on how the global
batch is split among replicas; `keras_global_layers.adopt_keras_layer` installs them.
"""
from __future__ import annotations

import functools
import math
import sys
from typing import Any, Callable, FrozenSet, Optional, Sequence, Tuple

import torch

from distrib import hooks
from distrib.data.distribution import batch_position
from distrib.strategies.layer_patches.global_dropout import global_place, replica_id_of, stepping_strategy
from distrib.strategies.layer_patches.keyed_hash import keyed_bits, keyed_keep_mask, mix32

__all__ = ["install_keras_dropout", "install_keras_noise", "keyed_uniform", "keyed_normal"]

_M32 = 0xFFFFFFFF


def install_keras_dropout() -> bool:
    """Make Keras's seeded dropout drop by the global row in multi-replica steps; False without Keras on torch.

    Keras's torch backend draws a *seeded* dropout's mask (``Dropout(seed=)``,
    ``SpatialDropout1D/2D/3D``, a ``noise_shape``, ``keras.random.dropout``
    with a seed, the dropout of ``Attention`` and of recurrent cells) with
    ``torch.bernoulli`` on a mask of the replica's shape. In a multi-replica
    step its ``backend.random.dropout`` instead draws the call's seed from the
    same place Keras does (the layer's ``SeedGenerator``, advanced one step as
    Keras advances it; a fixed int seed gives the same mask at every call, as
    in Keras), hashes it into a key, and keeps each element of the noise shape
    by `keyed_hash.keyed_keep_mask` of its global row: replicas hold their
    seed generators in the same state (they are variables broadcast from the
    chief), so they draw the same key, and the layer's seed still decides the
    masks. Kept values are divided by ``1 - rate`` as Keras does; a noise shape
    whose first dimension is 1 (for more than one row) is one mask shared by
    every row of the global batch. Unseeded dropout without a noise shape
    calls ``torch.nn.functional.dropout``, which `global_dropout` covers.
    ``global_batch_dropout=False`` keeps Keras's own draw.
    """
    keras = sys.modules.get("keras")
    if keras is None or keras.backend.backend() != "torch":
        return False
    hooks.keras_random_override("dropout", _make_keras_dropout)
    return True


def _make_keras_dropout(original: Callable[..., Any]) -> Callable[..., Any]:
    def dropout(inputs: Any, rate: Any, noise_shape: Any = None, seed: Any = None) -> Any:
        keyed = _keyed_if_stepping(inputs, rate, noise_shape, seed)
        return original(inputs, rate, noise_shape=noise_shape, seed=seed) if keyed is None else keyed
    dropout.__doc__ = original.__doc__
    return dropout


def _keyed_if_stepping(inputs: Any, rate: Any, noise_shape: Any, seed: Any) -> Optional[torch.Tensor]:
    """Keras's seeded dropout of ``inputs`` with a keyed global mask in a multi-replica step; else None."""
    if type(inputs) is not torch.Tensor or inputs.dim() == 0 or inputs.device.type == "meta":
        return None
    if not _draws_from_seed(seed, noise_shape) or not 0.0 < float(rate) < 1.0:
        return None  # Keras calls torch.nn.functional.dropout (keyed by global_dropout), or draws nothing
    strategy = stepping_strategy()
    if strategy is None:
        return None
    from keras.src.random.seed_generator import draw_seed

    key = _key_of(draw_seed(seed).tolist())
    shape = tuple(int(d) if d is not None else int(inputs.shape[i])
                  for i, d in enumerate(noise_shape if noise_shape is not None else inputs.shape))
    rows = int(inputs.shape[0])
    if shape[0] == 1 and rows != 1:
        keep = keyed_keep_mask(shape, 0, float(rate), key, device=inputs.device)
    else:
        first_row, salt = global_place(rows, replica_id_of(strategy))  # (not remembered by key: a fixed seed
        # draws the same key at every call, on other batches)
        keep = keyed_keep_mask(shape, first_row, float(rate), key, salt=salt, device=inputs.device)
    return torch.where(keep.broadcast_to(inputs.shape), inputs / (1.0 - float(rate)), torch.zeros_like(inputs))


def _draws_from_seed(seed: Any, noise_shape: Any) -> bool:
    """Whether Keras's torch backend draws this dropout's mask from ``seed`` (not ``F.dropout``)."""
    from keras.src.random.seed_generator import SeedGenerator

    unseeded = seed is None or (isinstance(seed, SeedGenerator) and seed._initial_seed is None)
    return noise_shape is not None or not unseeded


def _key_of(seed: Sequence[int]) -> Tuple[int, int]:
    """Two 32-bit key words from a Keras seed ``[seed, counter]``, each depending on both.

    Hashed first: seeds or counters that differ in a few bits then give
    unrelated masks, not masks of XOR-shifted element indices.
    """
    s0, s1 = (int(v) & _M32 for v in seed)
    k0 = mix32(mix32(s0 ^ 0x9E3779B9) ^ s1)
    return k0, mix32(mix32(s1 ^ 0x85EBCA6B) ^ k0)


def install_keras_noise() -> bool:
    """Make Keras's ``GaussianNoise``, ``GaussianDropout`` and ``AlphaDropout`` draw by the global row in
    multi-replica steps; False without Keras on torch.

    Overrides the torch backend's ``normal`` and ``uniform``; only the draws those layers' ``call`` makes
    are keyed (`_asked_by_noise_layer`), every other caller gets Keras's own.

    ``GaussianNoise``, ``GaussianDropout`` and ``AlphaDropout`` draw their
    noise with the backend's ``normal`` (``mean + stddev·z``) and ``uniform``
    (AlphaDropout keeps a unit where ``u >= rate``, then applies its affine
    ``a·x + b``) of the replica's shape. In a multi-replica step the draws
    those layers' ``call`` makes (found by the calling code, so no other
    caller's draws change) take their seed as Keras does (one step of the
    layer's ``SeedGenerator`` per call), hash it into a key, and return
    `keyed_uniform` / `keyed_normal` values of each element's global row:
    uniforms from the top bits of the hash `keyed_keep_mask` thresholds, and
    normals by Box-Muller on two such uniforms. They are draws of Keras's
    distributions, not Keras's own values; Keras's code then computes the
    layer from them, so ``AlphaDropout`` is Keras's formula on the keyed mask.
    Keyed only where the draw's first dimension is the batch (the replica's
    rows, ``k`` times them, or 1 for a noise shape ``(1, ...)``: one draw for
    the global batch); evaluation draws nothing, and outside a multi-replica
    step, with ``global_batch_dropout=False`` or another first dimension
    Keras draws its own.
    """
    keras = sys.modules.get("keras")
    if keras is None or keras.backend.backend() != "torch":
        return False
    hooks.keras_random_override("normal", _make_keras_normal)
    hooks.keras_random_override("uniform", _make_keras_uniform)
    return True


def _make_keras_normal(original: Callable[..., Any]) -> Callable[..., Any]:
    def normal(shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = None, seed: Any = None) -> Any:
        z = _keyed_noise(keyed_normal, shape, dtype, seed, sys._getframe(1))
        if z is None:
            return original(shape, mean=mean, stddev=stddev, dtype=dtype, seed=seed)
        return z * stddev + mean
    normal.__doc__ = original.__doc__
    return normal


def _make_keras_uniform(original: Callable[..., Any]) -> Callable[..., Any]:
    def uniform(shape: Any, minval: Any = 0.0, maxval: Any = 1.0, dtype: Any = None, seed: Any = None) -> Any:
        u = _keyed_noise(keyed_uniform, shape, dtype, seed, sys._getframe(1))
        if u is None:
            return original(shape, minval=minval, maxval=maxval, dtype=dtype, seed=seed)
        return (maxval - minval) * u + minval
    uniform.__doc__ = original.__doc__
    return uniform


def _keyed_noise(draw: Callable[..., torch.Tensor], shape: Any, dtype: Any, seed: Any,
                 caller: Any) -> Optional[torch.Tensor]:
    """``draw``'s keyed values for a noise layer's draw in a multi-replica step; None: Keras's own draw.

    Keyed only where the first dimension is the batch (`_noise_place`), the
    dtype is floating and the device not ``meta``. The seed is drawn as
    Keras's own draw would (one ``draw_seed``: a ``SeedGenerator`` advances
    one step), and only once it is known that the draw is keyed.
    """
    if not _asked_by_noise_layer(caller) or len(shape) == 0:
        return None
    strategy = stepping_strategy()
    if strategy is None:
        return None
    from keras.src.backend.config import floatx
    from keras.src.backend.torch.core import get_device, to_torch_dtype
    from keras.src.random.seed_generator import draw_seed

    torch_dtype = to_torch_dtype(dtype or floatx())
    device = get_device()
    if not torch_dtype.is_floating_point or str(device) == "meta":
        return None
    dims = tuple(int(d) for d in shape)
    place = _noise_place(dims[0], replica_id_of(strategy))
    if place is None:
        return None
    key = _key_of(draw_seed(seed).tolist())
    return draw(dims, place[0], key, salt=place[1], dtype=torch_dtype, device=device)


#: Frames from a backend draw up to the layer ``call`` that asked for it: Keras 3.15 calls the backend
#: directly (``backend.random.normal``, ``ops.random.uniform``); a second allows one wrapper between.
_CALLER_DEPTH = 2


def _asked_by_noise_layer(frame: Any) -> bool:
    """Whether ``frame`` (a draw's caller) or the one above it is ``GaussianNoise``, ``GaussianDropout`` or
    ``AlphaDropout``'s ``call`` (a subclass that calls it through ``super()`` too).

    By the calling code, not by the shape: random preprocessing layers and a
    model's own ``keras.random`` draws of the batch's shape keep Keras's draws.
    """
    codes = _noise_layer_codes()
    for _ in range(_CALLER_DEPTH):
        if frame is None:
            return False
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


@functools.lru_cache(maxsize=1)
def _noise_layer_codes() -> FrozenSet[Any]:
    layers = sys.modules["keras"].layers
    return frozenset(cls.call.__code__ for cls in (layers.GaussianNoise, layers.GaussianDropout, layers.AlphaDropout))


def _noise_place(rows: int, replica_id: int) -> Optional[Tuple[int, int]]:
    """``(first global row, salt)`` of a noise draw whose first dimension is ``rows``; None: Keras's own draw.

    ``rows`` that are ``k`` times the replica's rows are ``k`` per example
    (``TimeDistributed`` folds time into the batch); a first dimension of 1
    (an ``AlphaDropout`` noise shape ``(1, ...)``) when the replica holds
    more rows is one draw for the whole global batch; any other size is not
    the batch. Where the batch's place is unknown the draw is salted with the
    replica id, so replicas still draw independently.

    Example (6 rows over 3 replicas, replica 1 holds global rows 2 and 3):
        ``rows=2`` -> ``(2, 0)``; ``rows=4`` (2 per example) -> ``(4, 0)``;
        ``rows=1`` -> ``(0, 0)``; ``rows=3`` -> None.
    """
    if rows <= 0:
        return None
    position = batch_position.current()
    if position is not None and position.rows > 0:
        if rows == 1 and position.rows > 1:
            return 0, 0
        if rows % position.rows:
            return None
    return global_place(rows, replica_id)


def _mantissa_bits(dtype: torch.dtype) -> int:
    """Bits of a uniform in ``[0, 1)`` that ``dtype`` holds exactly (float16 11, bfloat16 8, float32 24; at most 32)."""
    return min(1 - int(math.log2(torch.finfo(dtype).eps)), 32)


def keyed_uniform(shape: Sequence[int], first_row: int, key: Tuple[int, int], salt: int = 0,
                  dtype: torch.dtype = torch.float32, device: Any = None) -> torch.Tensor:
    """Uniform values in ``[0, 1)`` of ``shape`` for global rows ``first_row ..``: the top bits of `keyed_bits`.

    The top ``b`` bits of each element's hash times ``2**-b``, with ``b`` the
    bits ``dtype`` holds exactly (24 for float32, 32 for float64), so no value
    rounds up to 1. A pure function of its inputs: the rows of a global batch
    get the same values whichever replica holds them. Not the values Keras's
    own ``uniform`` draws: values of the same distribution.

    Example (global rows 2..3 of a 6-row draw):
        >>> u = keyed_uniform((6, 3), 0, (7, 9))
        >>> torch.equal(keyed_uniform((2, 3), 2, (7, 9)), u[2:4])
        True
    """
    bits = _mantissa_bits(dtype)
    h = keyed_bits(shape, first_row, key, salt=salt, device=device)
    return (h >> (32 - bits)).to(dtype).mul_(2.0 ** -bits)


def keyed_normal(shape: Sequence[int], first_row: int, key: Tuple[int, int], salt: int = 0,
                 dtype: torch.dtype = torch.float32, device: Any = None) -> torch.Tensor:
    """Standard normal values of ``shape`` for global rows ``first_row ..``, by Box-Muller on two keyed uniforms.

    ``z = sqrt(-2 ln(1 - u1)) * cos(2 pi u2)``, with ``u1`` and ``u2`` the
    `keyed_uniform` values of ``key`` and of a second key hashed from it, in
    float32 (float64 for float64) and cast to ``dtype``. ``1 - u1`` is never 0,
    so every value is finite: at most about 5.8 in size from float32's 24-bit
    uniforms (6.7 in float64), a tail of probability below 1e-8 cut off. A pure
    function of its inputs, like `keyed_uniform`; values of a normal
    distribution, not Keras's own draws.

    Example:
        >>> z = keyed_normal((400, 250), 0, (7, 9))
        >>> abs(z.mean().item()) < 0.01 and abs(z.std().item() - 1) < 0.01
        True
    """
    work = torch.float64 if dtype == torch.float64 else torch.float32
    u1 = keyed_uniform(shape, first_row, key, salt=salt, dtype=work, device=device)
    u2 = keyed_uniform(shape, first_row, _second_key(key), salt=salt, dtype=work, device=device)
    radius = torch.log1p(u1.neg_()).mul_(-2.0).sqrt_()
    return radius.mul_(torch.cos(u2.mul_(2.0 * math.pi))).to(dtype)


def _second_key(key: Tuple[int, int]) -> Tuple[int, int]:
    """Another key hashed from ``key``: Box-Muller's second uniform is independent of the first."""
    return mix32(key[0] ^ 0x68E31DA4), mix32(key[1] ^ 0xB5297A4D)
