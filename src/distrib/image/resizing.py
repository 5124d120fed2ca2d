"""``tf.image.resize`` with TF 2's pixel centres, by torch's interpolation.

``method="bilinear"`` (TF's default) is ``torch.nn.functional.interpolate``'s
bilinear with ``align_corners=False`` (TF 2's half-pixel centres), and
``"nearest"`` is its ``"nearest-exact"``; ``antialias=True`` (bilinear,
when shrinking) is torch's antialiased bilinear. Other methods (``"bicubic"``,
``"area"``, ``"lanczos3"``...) are refused by name: torch's versions compute
other numbers than TF's (its bicubic uses another kernel).

Example:
    >>> resize(torch.ones(4, 4, 3), [2, 2]).shape
    torch.Size([2, 2, 3])
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

from distrib.image.geometry import as_image

__all__ = ["resize", "ResizeMethod"]


class ResizeMethod:
    """TF's method names (``tf.image.ResizeMethod``)."""

    BILINEAR = "bilinear"
    NEAREST_NEIGHBOR = "nearest"


_MODES = {"bilinear": "bilinear", "nearest": "nearest-exact"}


def resize(images: Any, size: Sequence[int], method: str = ResizeMethod.BILINEAR,
           preserve_aspect_ratio: bool = False, antialias: bool = False) -> torch.Tensor:
    """``images`` resized to ``size = [height, width]``; float32 (``"nearest"`` keeps the dtype), as in TF.

    With ``preserve_aspect_ratio`` the image is scaled to fit inside ``size``
    (the sizes TF rounds to).
    """
    t = as_image(images, "resize")
    mode = _MODES.get(str(method).lower())
    if mode is None:
        raise ValueError(f"resize(method={method!r}): distrib computes TF's 'bilinear' and 'nearest'; "
                         "torch's other methods give other numbers than TF's")
    if len(size) != 2 or min(int(s) for s in size) <= 0:
        raise ValueError(f"resize(size={list(size)}): give [height, width], both > 0")
    height, width = int(size[0]), int(size[1])
    if preserve_aspect_ratio:
        scale = min(height / t.shape[-3], width / t.shape[-2])
        height, width = int(round(scale * t.shape[-3])), int(round(scale * t.shape[-2]))
    batched = t if t.dim() == 4 else t.unsqueeze(0)
    nchw = batched.permute(0, 3, 1, 2)
    if mode == "nearest-exact":
        out = F.interpolate(nchw.to(torch.float64), size=(height, width), mode=mode).to(t.dtype)
    else:
        out = F.interpolate(nchw.to(torch.float32), size=(height, width), mode=mode, align_corners=False,
                            antialias=bool(antialias))
    out = out.permute(0, 2, 3, 1)
    return out if t.dim() == 4 else out[0]
