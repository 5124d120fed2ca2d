"""Global-batch Keras 3 layers: BatchNormalization, seeded dropout and the noise layers behave as one process.

Keras 3 on the torch backend computes its layers with its own ops, not with
torch's BatchNorm and Dropout modules, so `distrib.strategies.layer_patches.batch_norm` and
`distrib.strategies.layer_patches.global_dropout` do not reach these:

* ``keras.layers.BatchNormalization`` takes its training mean and variance
  from ``_moments`` (its ``synchronized=True`` is TensorFlow-only). A layer
  adopted by a scope with several replicas (built in it, or in a model given
  to ``strategy.track_module`` / ``distrib.Model``) gets a ``_moments`` that
  sums, per channel, the values, their squares and the count (the mask's
  weight where Keras passes a mask) on each replica, adds them over the
  replicas in one all-reduce of 2·C+1 numbers (3·C with a mask) whose
  backward sums the statistics' gradients, and returns the global batch's
  mean and biased variance, computed in float64 as Keras's formulas do. Keras
  then normalises and updates its moving mean and variance (renorm's
  statistics too) with them, so every replica holds what one process would,
  and distrib does not average those variables after the step.
  ``CommunicationOptions(sync_batch_norm=False)`` leaves the layers alone
  (local statistics, moving statistics averaged); evaluation never calls
  ``_moments``; a subclass with its own ``_moments`` keeps it.

* Keras's seeded dropout (``Dropout(seed=)``, ``SpatialDropout1D/2D/3D``, a
  ``noise_shape``, ...) and the noise of ``GaussianNoise``, ``GaussianDropout``
  and ``AlphaDropout`` are drawn by each element's global row in a
  multi-replica step (`distrib.strategies.layer_patches.keras_random`).

Still share-dependent: the random preprocessing layers (``RandomFlip``,
``RandomRotation``, ``RandomCrop``, ``RandomZoom``, ``MixUp``...: draws of
the replica's shape, not keyed; an elastic job names those in its models, see
`random_preprocessing_layers`); a subclass of a noise layer with its own
``call`` that draws itself; ``BatchNormalization`` built outside any scope
and never given to ``track_module``; a noise shape of ``(1, ...)`` on a
replica that holds a single row (taken as that row's own mask).

Example (2 replicas, one channel, replica 0 holds [0, 2] and replica 1
[4, 6]): both replicas' ``_moments`` return mean 3.0 and variance 5.0, what
one process gets for [0, 2, 4, 6], so the moving mean moves towards 3.0 on
both (``momentum=0.9``, from 0: 0.3).
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

import torch

from distrib.strategies.layer_patches.batch_norm import all_reduce_sum
from distrib.strategies.layer_patches.keras_random import install_keras_dropout, install_keras_noise, keyed_normal, keyed_uniform
from distrib.utils.optional import keras_layers_class

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["is_keras_layer", "adopt_keras_layer", "use_global_batch_statistics", "uses_global_batch_statistics",
           "install_keras_dropout", "install_keras_noise", "keyed_uniform", "keyed_normal", "global_moments",
           "random_preprocessing_layers"]

_MARK = "_distrib_global_batch_statistics"
#: The statistics Keras derives from ``_moments`` (renorm's three only exist with ``renorm=True``).
_STATISTICS = ("moving_mean", "moving_variance", "moving_stddev", "renorm_mean", "renorm_stddev")


def is_keras_layer(module: Any) -> bool:
    """True for a Keras 3 layer or model (only when ``keras`` is already imported)."""
    layer = keras_layers_class("Layer")
    return layer is not None and isinstance(module, layer)


def adopt_keras_layer(layer: Any, strategy_of: Callable[[], Optional["Strategy"]], *, sync_batch_norm: bool,
                      global_batch_dropout: bool) -> List[torch.Tensor]:
    """Switch a Keras layer and the layers in it to global-batch behaviour (idempotent).

    Args:
        layer: any module; only Keras layers are changed.
        strategy_of: returns the multi-replica strategy, or None (a weak reference).
        sync_batch_norm: switch ``BatchNormalization`` layers to global statistics.
        global_batch_dropout: make seeded Keras dropout and the noise of ``GaussianNoise``,
            ``GaussianDropout`` and ``AlphaDropout`` global in multi-replica steps.

    Returns:
        The statistics variables (as torch tensors) of the batch norm layers
        switched now: every replica computes them alike, so they need no averaging.
    """
    if not is_keras_layer(layer):
        return []
    if global_batch_dropout:
        install_keras_dropout()
        install_keras_noise()
    if not sync_batch_norm:
        return []
    statistics: List[torch.Tensor] = []
    for inner in layer._flatten_layers(include_self=True, recursive=True):
        if use_global_batch_statistics(inner, strategy_of):
            statistics += [v.value for v in (getattr(inner, name, None) for name in _STATISTICS) if v is not None]
    return statistics


def uses_global_batch_statistics(layer: Any) -> bool:
    """True if `use_global_batch_statistics` switched ``layer``."""
    return bool(getattr(layer, "__dict__", {}).get(_MARK, False))


def use_global_batch_statistics(layer: Any, strategy_of: Callable[[], Optional["Strategy"]]) -> bool:
    """Make a Keras ``BatchNormalization`` take global-batch moments in training; False if not one."""
    batch_norm = keras_layers_class("BatchNormalization")
    if (batch_norm is None or not isinstance(layer, batch_norm) or uses_global_batch_statistics(layer)
            or type(layer)._moments is not batch_norm._moments):
        return False
    # Through __dict__: Keras's __setattr__ would track the method as layer state.
    layer.__dict__[_MARK] = True
    layer.__dict__["_moments"] = types.MethodType(_make_moments(strategy_of), layer)
    return True


def _make_moments(strategy_of: Callable[[], Optional["Strategy"]]) -> Callable[..., Tuple[Any, Any]]:
    def _moments(self: Any, inputs: Any, mask: Any) -> Tuple[Any, Any]:
        strategy = strategy_of()
        if (strategy is None or not strategy.multi_replica or not isinstance(inputs, torch.Tensor)
                or inputs.device.type == "meta"):
            return type(self)._moments(self, inputs, mask)
        return global_moments(inputs, mask, self._reduction_axes, strategy.collective, strategy.comm_device)
    return _moments


def global_moments(inputs: torch.Tensor, mask: Optional[torch.Tensor], reduction_axes: Sequence[int],
                   collective: Any, comm_device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and biased variance of the global batch, as Keras's ``_moments`` on all of it.

    ``mask`` (the inputs' shape less the last axis) weighs each position as
    Keras does: ``mean = Σ m·x / (Σ m + ε)`` and ``variance = Σ m·(x - mean)²
    / (Σ m + ε)``, with Keras's ``backend.epsilon()``.
    """
    from keras.src import backend

    axes = sorted(a % inputs.dim() for a in reduction_axes)
    channels = _prod(inputs.shape[a] for a in range(inputs.dim()) if a not in axes)
    x = inputs.to(torch.float64)
    if mask is None:
        count = torch.tensor([inputs.numel() // max(channels, 1)], dtype=torch.float64, device=x.device)
        local = torch.cat([x.sum(axes), (x * x).sum(axes), count])
    else:
        keep = torch.as_tensor(mask, device=x.device).to(torch.bool).unsqueeze(-1).expand(inputs.shape)
        xm = torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))
        local = torch.cat([xm.sum(axes), (xm * xm).sum(axes), keep.to(torch.float64).sum(axes)])
    total = all_reduce_sum(local, collective, comm_device)
    s1, s2, weight = total[:channels], total[channels:2 * channels], total[2 * channels:]
    if mask is None:
        mean = s1 / weight
        variance = s2 / weight - mean * mean
    else:
        denominator = weight + backend.epsilon()
        mean = s1 / denominator
        variance = (s2 - 2 * mean * s1 + mean * mean * weight) / denominator
    return mean.to(inputs.dtype), variance.clamp_min(0.0).to(inputs.dtype)


def _prod(values: Any) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


# ------------------------------------------------------- random preprocessing
def random_preprocessing_layers(layer: Any) -> List[str]:
    """Class names (each once) of Keras's random preprocessing layers in ``layer``, itself included.

    Such a layer (``RandomFlip``, ``RandomRotation``, ``RandomCrop``,
    ``RandomZoom``, ``MixUp``...: a ``keras.src.layers.preprocessing`` class
    holding a seed generator) draws by the replica's share of the batch,
    which distrib does not key; `share_warning.say_if_a_resize_changes_the_result`
    names them in an elastic job. Empty for anything but a Keras layer.
    """
    if not is_keras_layer(layer):
        return []
    names: dict = {}
    for inner in layer._flatten_layers(include_self=True, recursive=True):
        if getattr(inner, "_seed_generators", None) and _is_preprocessing(type(inner)):  # Keras internals: only seeded layers have them
            names[type(inner).__name__] = None
    return list(names)


def _is_preprocessing(cls: type) -> bool:
    return any(c.__module__.startswith("keras.src.layers.preprocessing") for c in cls.__mro__)
