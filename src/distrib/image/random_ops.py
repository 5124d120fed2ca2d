"""``tf.image``'s random ops: flips, crops, brightness and contrast, keyed so runs and resumes agree.

The numbers come from `distrib.data.transforms.random_draws`: inside a ``Dataset.map``
function they depend on the map's seed, the pass, the element's position,
the op's place among the function's random calls, its ``seed`` and, for a
batch, each image's row in the global batch -- so an interrupted and resumed
pipeline, and the same pipeline read by 1, 2 or 3 replicas, give every
example the same crop and flip. They are not TF's random stream: the same
``seed`` gives other draws than TensorFlow's (as ``shuffle`` does). Outside a
map, an op with a ``seed`` counts its calls in the process; without one it
draws from torch's global generator.

What is drawn follows TF: ``random_flip_*`` one coin per image (per row of a
``[B, H, W, C]`` batch), ``random_crop`` one offset per dimension for the
whole tensor, ``random_brightness`` and ``random_contrast`` one factor for the
whole tensor.

Example:
    >>> ds = Dataset.from_tensor_slices(images).map(
    ...     lambda x: distrib.image.random_flip_left_right(distrib.image.random_crop(x, [24, 24, 3])))
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from distrib.data.transforms.random_draws import uniform, uniform_values
from distrib.image.color import adjust_brightness, adjust_contrast
from distrib.image.geometry import as_image

__all__ = ["random_flip_left_right", "random_flip_up_down", "random_crop", "random_brightness",
           "random_contrast"]


def _random_flip(image: Any, seed: Optional[int], axis: int, who: str) -> torch.Tensor:
    t = as_image(image, who)
    if t.dim() == 3:
        return torch.flip(t, dims=[axis]) if uniform_values(seed, 1)[0] < 0.5 else t
    flips = torch.from_numpy(uniform(seed, 1, rows=t.shape[0])[:, 0] < 0.5).to(t.device)
    return torch.where(flips.reshape(-1, 1, 1, 1), torch.flip(t, dims=[axis]), t)


def random_flip_left_right(image: Any, seed: Optional[int] = None) -> torch.Tensor:
    """Each image mirrored horizontally with probability 1/2."""
    return _random_flip(image, seed, -2, "random_flip_left_right")


def random_flip_up_down(image: Any, seed: Optional[int] = None) -> torch.Tensor:
    """Each image mirrored vertically with probability 1/2."""
    return _random_flip(image, seed, -3, "random_flip_up_down")


def random_crop(value: Any, size: Sequence[int], seed: Optional[int] = None) -> torch.Tensor:
    """A ``size``-shaped slice of ``value`` (any rank) at a uniformly drawn offset."""
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    size = [int(s) for s in size]
    if len(size) != t.dim() or any(s < 0 or s > d for s, d in zip(size, t.shape)):
        raise ValueError(f"random_crop(size={size}): need one size per dimension of the value's shape "
                         f"{tuple(t.shape)}, each at most that dimension")
    draws = uniform_values(seed, t.dim())
    offsets = [int(u * (d - s + 1)) for u, d, s in zip(draws, t.shape, size)]
    if t.layout != torch.strided:
        return t[tuple(slice(o, o + s) for o, s in zip(offsets, size))]
    # one view op (indexing by slices costs a dispatch per dimension, with the GIL held)
    start = t.storage_offset() + sum(o * st for o, st in zip(offsets, t.stride()))
    return t.as_strided(size, t.stride(), start)


def random_brightness(image: Any, max_delta: float, seed: Optional[int] = None) -> torch.Tensor:
    """`adjust_brightness` by a delta drawn uniformly from ``[-max_delta, max_delta)``."""
    if max_delta < 0:
        raise ValueError(f"random_brightness(max_delta={max_delta}): max_delta must be >= 0")
    delta = -max_delta + 2 * max_delta * uniform_values(seed, 1)[0]
    return adjust_brightness(image, delta)


def random_contrast(image: Any, lower: float, upper: float, seed: Optional[int] = None) -> torch.Tensor:
    """`adjust_contrast` by a factor drawn uniformly from ``[lower, upper)``."""
    if upper <= lower or lower < 0:
        raise ValueError(f"random_contrast(lower={lower}, upper={upper}): need 0 <= lower < upper")
    factor = lower + (upper - lower) * uniform_values(seed, 1)[0]
    return adjust_contrast(image, factor)
