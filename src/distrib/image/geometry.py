"""``tf.image``'s deterministic geometry: flips, rotations, crops and pads of ``[H, W, C]`` / ``[B, H, W, C]`` images.

Images keep TensorFlow's channels-last layout, so a ported ``map`` function
runs unchanged; a torch convolution wants ``[C, H, W]``:
``image.permute(2, 0, 1)`` at the end of the map. Each op computes what TF's
does (tested against TensorFlow 2.21's outputs) and takes tensors, numpy
arrays or lists.

Example:
    >>> image = torch.arange(6).reshape(2, 3, 1)
    >>> flip_left_right(image)[..., 0]
    tensor([[2, 1, 0],
            [5, 4, 3]])
    >>> resize_with_crop_or_pad(image, 4, 2)[..., 0]
    tensor([[0, 0],
            [0, 1],
            [3, 4],
            [0, 0]])
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["as_image", "flip_left_right", "flip_up_down", "rot90", "transpose", "central_crop",
           "crop_to_bounding_box", "pad_to_bounding_box", "resize_with_crop_or_pad"]


def as_image(image: Any, who: str) -> torch.Tensor:
    """``image`` as a tensor of rank 3 ``[H, W, C]`` or 4 ``[B, H, W, C]``; an error naming ``who`` otherwise."""
    t = image if isinstance(image, torch.Tensor) else torch.as_tensor(image)
    if t.dim() not in (3, 4):
        raise ValueError(f"{who}: an image is [height, width, channels] or a batch [batch, height, width, "
                         f"channels] (TensorFlow's layout), got shape {tuple(t.shape)}")
    return t


def flip_left_right(image: Any) -> torch.Tensor:
    """The image mirrored horizontally (the width axis reversed)."""
    return torch.flip(as_image(image, "flip_left_right"), dims=[-2])


def flip_up_down(image: Any) -> torch.Tensor:
    """The image mirrored vertically (the height axis reversed)."""
    return torch.flip(as_image(image, "flip_up_down"), dims=[-3])


def rot90(image: Any, k: int = 1) -> torch.Tensor:
    """The image rotated counter-clockwise by ``k`` quarter turns."""
    return torch.rot90(as_image(image, "rot90"), int(k), dims=[-3, -2])


def transpose(image: Any) -> torch.Tensor:
    """Height and width swapped."""
    return as_image(image, "transpose").transpose(-3, -2)


def central_crop(image: Any, central_fraction: float) -> torch.Tensor:
    """The central ``central_fraction`` (in (0, 1]) of the height and width, as TF rounds it."""
    t = as_image(image, "central_crop")
    if not 0.0 < central_fraction <= 1.0:
        raise ValueError(f"central_crop(central_fraction={central_fraction}): it must be in (0, 1]")
    if central_fraction == 1.0:
        return t
    height, width = t.shape[-3], t.shape[-2]
    top = int((height - height * central_fraction) / 2)
    left = int((width - width * central_fraction) / 2)
    return t[..., top:height - top, left:width - left, :]


def _check_box(t: torch.Tensor, who: str, offset_height: int, offset_width: int, target_height: int,
               target_width: int) -> None:
    if min(offset_height, offset_width) < 0 or min(target_height, target_width) <= 0:
        raise ValueError(f"{who}: offsets must be >= 0 and target sizes > 0, got offsets ({offset_height}, "
                         f"{offset_width}) and target ({target_height}, {target_width})")


def crop_to_bounding_box(image: Any, offset_height: int, offset_width: int, target_height: int,
                         target_width: int) -> torch.Tensor:
    """Rows ``offset_height:+target_height`` and columns ``offset_width:+target_width``."""
    t = as_image(image, "crop_to_bounding_box")
    _check_box(t, "crop_to_bounding_box", offset_height, offset_width, target_height, target_width)
    height, width = t.shape[-3], t.shape[-2]
    if offset_height + target_height > height or offset_width + target_width > width:
        raise ValueError(f"crop_to_bounding_box: the box ({offset_height}+{target_height}, "
                         f"{offset_width}+{target_width}) does not fit the {height}x{width} image")
    return t[..., offset_height:offset_height + target_height, offset_width:offset_width + target_width, :]


def pad_to_bounding_box(image: Any, offset_height: int, offset_width: int, target_height: int,
                        target_width: int) -> torch.Tensor:
    """The image placed at ``(offset_height, offset_width)`` in a zero image of the target size."""
    t = as_image(image, "pad_to_bounding_box")
    _check_box(t, "pad_to_bounding_box", offset_height, offset_width, target_height, target_width)
    height, width = t.shape[-3], t.shape[-2]
    bottom, right = target_height - offset_height - height, target_width - offset_width - width
    if bottom < 0 or right < 0:
        raise ValueError(f"pad_to_bounding_box: the {height}x{width} image at ({offset_height}, {offset_width}) "
                         f"does not fit in {target_height}x{target_width}")
    return torch.nn.functional.pad(t, (0, 0, offset_width, right, offset_height, bottom))


def resize_with_crop_or_pad(image: Any, target_height: int, target_width: int) -> torch.Tensor:
    """Centrally cropped and/or zero-padded to ``target_height`` x ``target_width`` (TF's offsets)."""
    t = as_image(image, "resize_with_crop_or_pad")
    if target_height <= 0 or target_width <= 0:
        raise ValueError(f"resize_with_crop_or_pad: target sizes must be > 0, got ({target_height}, {target_width})")
    height, width = t.shape[-3], t.shape[-2]
    dh, dw = target_height - height, target_width - width
    cropped = crop_to_bounding_box(t, max(-dh // 2, 0), max(-dw // 2, 0), min(target_height, height),
                                   min(target_width, width))
    return pad_to_bounding_box(cropped, max(dh // 2, 0), max(dw // 2, 0), target_height, target_width)
