"""``tf.image``'s dtype conversion and pixel-value ops, computed as TensorFlow computes them.

Integer images hold ``0..max`` of their dtype, floating images ``0..1``:
`convert_image_dtype` moves between the two (``uint8`` 255 is 1.0), and the
value ops work in float32 and convert back (saturating), as TF's do.

Example:
    >>> convert_image_dtype(torch.tensor([[[0, 128, 255]]], dtype=torch.uint8), torch.float32)
    tensor([[[0.0000, 0.5020, 1.0000]]])
    >>> adjust_brightness(torch.tensor([[[0.2]]]), 0.1)
    tensor([[[0.3000]]])
"""
from __future__ import annotations

from typing import Any, Union

import torch

from distrib.image.geometry import as_image

__all__ = ["convert_image_dtype", "adjust_brightness", "adjust_contrast", "per_image_standardization",
           "rgb_to_grayscale", "grayscale_to_rgb", "as_dtype"]

#: TF's weights of red, green and blue in a grey value.
_GREY = (0.2989, 0.5870, 0.1140)


def as_dtype(dtype: Union[str, torch.dtype]) -> torch.dtype:
    """A torch dtype from torch's or TF's name (``"float32"``, ``"uint8"``)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = getattr(dtype, "name", dtype)  # tf.float32 has .name
    found = getattr(torch, str(name), None)
    if not isinstance(found, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}: use a torch dtype or a name such as 'float32' or 'uint8'")
    return found


def _max(dtype: torch.dtype) -> int:
    return torch.iinfo(dtype).max


def convert_image_dtype(image: Any, dtype: Union[str, torch.dtype], saturate: bool = False) -> torch.Tensor:
    """The image in ``dtype``, rescaled between integer ranges and [0, 1] as TF does.

    Float to integer multiplies by ``max + 0.5`` and truncates; ``saturate``
    clips first, so values out of [0, 1] do not wrap around.
    """
    t = image if isinstance(image, torch.Tensor) else torch.as_tensor(image)
    target = as_dtype(dtype)
    if t.dtype == target:
        return t
    if t.dtype == torch.bool or target == torch.bool:
        raise ValueError("convert_image_dtype: images of bool are not images (TF refuses them too)")
    if not t.is_floating_point() and not target.is_floating_point:
        scale_in, scale_out = _max(t.dtype) + 1, _max(target) + 1
        wide = t.to(torch.int64)
        if scale_in > scale_out:
            return torch.div(wide, scale_in // scale_out, rounding_mode="floor").to(target)
        return (wide * (scale_out // scale_in)).to(target)
    if not t.is_floating_point():  # integer -> float
        return t.to(target) * (1.0 / _max(t.dtype))
    if target.is_floating_point:
        return t.to(target)
    scale = _max(target) + 0.5
    if saturate:
        info = torch.iinfo(target)
        t = t.clamp(info.min / scale, info.max / scale)
    return (t * scale).to(target)


def _as_float(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype in (torch.float16, torch.float32, torch.float64) else convert_image_dtype(t, torch.float32)


def _back(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return convert_image_dtype(t, dtype, saturate=True)


def adjust_brightness(image: Any, delta: float) -> torch.Tensor:
    """``image + delta`` in [0, 1] terms (an integer image is converted there and back)."""
    t = image if isinstance(image, torch.Tensor) else torch.as_tensor(image)
    return _back(_as_float(t) + float(delta), t.dtype)


def adjust_contrast(images: Any, contrast_factor: float) -> torch.Tensor:
    """``(x - mean) * contrast_factor + mean``, the mean per image and channel over height and width."""
    t = as_image(images, "adjust_contrast")
    x = _as_float(t)
    mean = x.mean(dim=(-3, -2), keepdim=True)
    return _back((x - mean) * float(contrast_factor) + mean, t.dtype)


def per_image_standardization(image: Any) -> torch.Tensor:
    """Each image scaled to mean 0 and variance 1: ``(x - mean) / max(std, 1 / sqrt(pixels))`` (float32)."""
    t = as_image(image, "per_image_standardization")
    x = t if t.dtype in (torch.float16, torch.float32) else t.to(torch.float32)
    wide = x.to(torch.float32)
    pixels = t.shape[-3] * t.shape[-2] * t.shape[-1]
    mean = wide.mean(dim=(-3, -2, -1), keepdim=True)
    std = wide.std(dim=(-3, -2, -1), keepdim=True, unbiased=False)
    out = (wide - mean) / torch.clamp(std, min=pixels ** -0.5)
    return out.to(t.dtype) if t.dtype == torch.float16 else out


def rgb_to_grayscale(images: Any) -> torch.Tensor:
    """One grey channel from the last axis's red, green and blue (TF's weights), in the input's dtype."""
    t = images if isinstance(images, torch.Tensor) else torch.as_tensor(images)
    if t.dim() < 1 or t.shape[-1] != 3:
        raise ValueError(f"rgb_to_grayscale: the last axis holds red, green and blue (size 3), got shape "
                         f"{tuple(t.shape)}")
    x = _as_float(t)
    grey = (x * torch.tensor(_GREY, dtype=x.dtype, device=x.device)).sum(-1, keepdim=True)
    return _back(grey, t.dtype)


def grayscale_to_rgb(images: Any) -> torch.Tensor:
    """The grey channel repeated as red, green and blue."""
    t = images if isinstance(images, torch.Tensor) else torch.as_tensor(images)
    if t.dim() < 1 or t.shape[-1] != 1:
        raise ValueError(f"grayscale_to_rgb: the last axis is the grey channel (size 1), got shape {tuple(t.shape)}")
    return t.repeat_interleave(3, dim=-1)
