"""Image files as tensors: tf.io's ``decode_*`` / ``encode_*`` and ``read_file``.

Images are TF's layout: ``[height, width, channels]`` uint8 tensors
(``[frames, height, width, 3]`` for an animated GIF). JPEGs are decoded by
simplejpeg (libjpeg-turbo's TurboJPEG API, TF's library) with TF's settings
(fast integer IDCT with fancy upsampling by default), so pixels equal TF's;
Pillow decodes PNG/GIF/BMP, scaled JPEGs (``ratio``) and CMYK JPEGs, and
encodes. Both decode with the GIL released, so threads decode in parallel.
Why these libraries: docs/input-pipelines.md.

Example:
    >>> image = decode_jpeg(read_file("cat.jpg"), channels=3)     # uint8 [H, W, 3]
    >>> decode_png(encode_png(image)).equal(image)
    True
"""
from __future__ import annotations

import io
import os
from typing import Any, Optional

import numpy as np
import torch

__all__ = ["read_file", "write_file", "decode_jpeg", "decode_png", "decode_gif", "decode_bmp",
           "decode_image", "encode_jpeg", "encode_png", "is_jpeg"]

_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
_CHANNELS = {"1": 1, "L": 1, "LA": 2, "La": 2, "RGB": 3, "RGBA": 4, "RGBa": 4, "I;16": 1, "I;16B": 1,
             "I": 1, "CMYK": 3, "YCbCr": 3, "P": 3, "PA": 4}


def read_file(filename: str) -> bytes:
    """The bytes of a file (``tf.io.read_file``)."""
    with open(os.fspath(filename), "rb", buffering=0) as handle:  # unbuffered: one read to the end
        return handle.readall()


def write_file(filename: str, contents: bytes) -> None:
    """Write ``contents`` to a file, replacing it (``tf.io.write_file``)."""
    with open(os.fspath(filename), "wb") as handle:
        handle.write(bytes(contents))


def is_jpeg(contents: bytes) -> bool:
    """True when ``contents`` starts like a JPEG file (``tf.io.is_jpeg``)."""
    return bytes(contents[:3]) == b"\xff\xd8\xff"


def _bytes(contents: Any, where: str) -> bytes:
    if isinstance(contents, (np.ndarray, np.generic)) and np.ndim(contents) == 0:
        contents = contents.item()
    if not isinstance(contents, (bytes, bytearray, memoryview)):
        raise TypeError(f"{where} takes the file's bytes (e.g. read_file(path)), got a {type(contents).__name__}")
    return bytes(contents)


def _open(contents: bytes, where: str, formats: tuple) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(contents), formats=list(formats))
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        kinds = "/".join(formats)
        raise ValueError(f"{where}: the {len(contents)} bytes are not a {kinds} image ({exc})") from None
    return image


def _load(image: Any, where: str) -> Any:
    try:
        image.load()  # the decoder runs with the GIL released
    except (OSError, ValueError, SyntaxError) as exc:
        raise ValueError(f"{where}: cannot decode the {image.format} image ({exc})") from None
    return image


def _check_channels(channels: Optional[int], where: str, allowed: tuple) -> int:
    channels = 0 if channels is None else int(channels)
    if channels not in allowed:
        raise ValueError(f"{where}: channels must be one of {list(allowed)}, got {channels}")
    return channels


def _to_hwc(image: Any, channels: int) -> torch.Tensor:
    """A loaded Pillow image as a uint8 HWC tensor with ``channels`` (0: as stored) channels."""
    native = _CHANNELS.get(image.mode, 3)
    if image.mode not in ("L", "LA", "RGB", "RGBA"):
        if image.mode == "P":
            image = image.convert("RGBA" if "transparency" in image.info else "RGB")
        elif image.mode == "PA":
            image = image.convert("RGBA")
        elif image.mode == "1":
            image = image.convert("L")
        else:
            image = image.convert("L" if native == 1 else "RGB")
        native = _CHANNELS[image.mode]
    want = channels or native
    if want != native:
        image = image.convert(_MODES[want])
    array = np.array(image, dtype=np.uint8)
    return torch.from_numpy(array.reshape(array.shape[0], array.shape[1], want))


def _check_size(height: int, width: int, where: str) -> None:
    """Refuse a size claim past Pillow's decompression-bomb limit before any memory is taken for it."""
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS
    if limit and height * width > 2 * limit:
        raise ValueError(f"{where}: the JPEG claims {height}x{width} pixels, more than the {2 * limit} allowed "
                         f"(PIL.Image.MAX_IMAGE_PIXELS x 2)")


def _decode_jpeg_turbo(data: bytes, channels: int, fancy_upscaling: bool, dct_method: str,
                       where: str) -> Optional[torch.Tensor]:
    """TF's decode via TurboJPEG; None where Pillow must do it (not a JPEG header, CMYK/YCCK)."""
    import simplejpeg

    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None  # Pillow names what the bytes are not
    if colorspace not in ("Gray", "YCbCr", "RGB"):
        return None
    _check_size(height, width, where)
    gray = channels == 1 or (channels == 0 and colorspace == "Gray")
    try:
        array = simplejpeg.decode_jpeg(data, colorspace="GRAY" if gray else "RGB",
                                       fastdct=dct_method != "INTEGER_ACCURATE",
                                       fastupsample=not fancy_upscaling)  # GIL released while decoding
    except ValueError as exc:
        raise ValueError(f"{where}: cannot decode the JPEG image ({exc})") from None
    return torch.from_numpy(array)


def decode_jpeg(contents: bytes, channels: int = 0, ratio: int = 1, fancy_upscaling: bool = True,
                try_recover_truncated: bool = False, acceptable_fraction: float = 1.0,
                dct_method: str = "", name: Optional[str] = None) -> torch.Tensor:
    """A JPEG's pixels as a uint8 ``[H, W, C]`` tensor (``tf.io.decode_jpeg``).

    ``channels``: 0 keeps the file's (1 or 3), 1 asks the decoder for
    grayscale (luma, as TF's), 3 for RGB. ``ratio`` (1, 2, 4, 8) scales down
    while decoding. ``dct_method``: ``""``/``"INTEGER_FAST"`` (TF's default:
    libjpeg-turbo's fast integer IDCT) or ``"INTEGER_ACCURATE"``;
    ``fancy_upscaling`` as TF. Pixels equal TF 2.21's for every setting
    tested (tests/unit/test_io_images.py). ``try_recover_truncated`` and
    ``acceptable_fraction`` are accepted (a truncated file is an error).
    """
    where = "decode_jpeg"
    channels = _check_channels(channels, where, (0, 1, 3))
    if ratio not in (1, 2, 4, 8):
        raise ValueError(f"{where}: ratio must be 1, 2, 4 or 8, got {ratio}")
    if dct_method not in ("", "INTEGER_FAST", "INTEGER_ACCURATE"):
        raise ValueError(f"{where}: dct_method must be '', 'INTEGER_FAST' or 'INTEGER_ACCURATE', got {dct_method!r}")
    data = _bytes(contents, where)
    if ratio == 1:
        pixels = _decode_jpeg_turbo(data, channels, fancy_upscaling, dct_method, where)
        if pixels is not None:
            return pixels
    image = _open(data, where, ("JPEG",))
    if channels == 1 or ratio != 1:
        size = (-(-image.size[0] // ratio), -(-image.size[1] // ratio)) if ratio != 1 else None
        image.draft("L" if channels == 1 else image.mode, size)
    one_plane = channels == 1 or len({(h, v) for _, h, v, _ in image.layer}) <= 1
    fast = dct_method != "INTEGER_ACCURATE" and (one_plane or not fancy_upscaling or ratio != 1)
    # Pillow's decoder options: (scale, draft); draft = libjpeg's fast IDCT without fancy upsampling.
    scale = image.decoderconfig[0] if image.decoderconfig else 1
    image.decoderconfig = (scale, 1 if fast else 0)
    return _to_hwc(_load(image, where), channels)


def decode_png(contents: bytes, channels: int = 0, dtype: torch.dtype = torch.uint8,
               name: Optional[str] = None) -> torch.Tensor:
    """A PNG's pixels as an ``[H, W, C]`` tensor of ``dtype`` (uint8 or uint16) (``tf.io.decode_png``).

    ``channels``: 0 keeps the file's (1 to 4; a palette becomes RGB or RGBA); 1, 3 or 4 converts.
    A 16-bit file read as uint8 keeps each value's high byte; an 8-bit file
    read as uint16 is scaled by 257, as TF does. 16-bit values are kept for
    grayscale files; 16-bit color files read as uint16 are not supported.
    """
    where = "decode_png"
    channels = _check_channels(channels, where, (0, 1, 3, 4))
    if dtype not in (torch.uint8, torch.uint16):
        raise ValueError(f"{where}: dtype must be torch.uint8 or torch.uint16, got {dtype}")
    data = _bytes(contents, where)
    image = _load(_open(data, where, ("PNG",)), where)
    if image.mode in ("I;16", "I;16B", "I"):
        wide = np.array(image).astype(np.uint16)
        wide = wide.reshape(wide.shape[0], wide.shape[1], 1)
        if channels not in (0, 1):
            wide = np.repeat(wide, 3, axis=2) if channels == 3 else np.concatenate(
                [np.repeat(wide, channels - 1, axis=2), np.full_like(wide, 65535)], axis=2)
        if dtype == torch.uint16:
            return torch.from_numpy(np.ascontiguousarray(wide.view(np.int16))).view(torch.uint16)
        return torch.from_numpy(np.ascontiguousarray((wide >> 8).astype(np.uint8)))
    if dtype == torch.uint16 and len(data) > 24 and data[24] == 16:  # IHDR's bit depth
        raise ValueError(f"{where}: 16-bit color PNGs read as uint16 are not supported (read as uint8)")
    pixels = _to_hwc(image, channels)
    if dtype == torch.uint16:
        return (pixels.to(torch.int32) * 257).to(torch.int16).view(torch.uint16)
    return pixels


def decode_gif(contents: bytes, name: Optional[str] = None) -> torch.Tensor:
    """A GIF's frames as a uint8 ``[frames, H, W, 3]`` tensor (``tf.io.decode_gif``)."""
    from PIL import ImageSequence

    where = "decode_gif"
    image = _open(_bytes(contents, where), where, ("GIF",))
    frames = [_to_hwc(_load(frame.convert("RGB"), where), 3) for frame in ImageSequence.Iterator(image)]
    return torch.stack(frames)


def decode_bmp(contents: bytes, channels: int = 0, name: Optional[str] = None) -> torch.Tensor:
    """A BMP's pixels as a uint8 ``[H, W, C]`` tensor (``tf.io.decode_bmp``)."""
    where = "decode_bmp"
    channels = _check_channels(channels, where, (0, 1, 3, 4))
    return _to_hwc(_load(_open(_bytes(contents, where), where, ("BMP",)), where), channels)


def decode_image(contents: bytes, channels: Optional[int] = None, dtype: torch.dtype = torch.uint8,
                 name: Optional[str] = None, expand_animations: bool = True) -> torch.Tensor:
    """A JPEG, PNG, GIF or BMP by its first bytes, decoded (``tf.io.decode_image``).

    GIFs give ``[frames, H, W, 3]`` (the first frame ``[H, W, 3]`` when
    ``expand_animations=False``). ``dtype=torch.float32`` scales to [0, 1].
    """
    data = _bytes(contents, "decode_image")
    head = data[:8]
    if is_jpeg(head):
        image = decode_jpeg(data, channels or 0)
    elif head.startswith(b"\x89PNG\r\n\x1a\n"):
        image = decode_png(data, channels or 0, torch.uint16 if dtype == torch.uint16 else torch.uint8)
    elif head[:6] in (b"GIF87a", b"GIF89a"):
        image = decode_gif(data)
        if not expand_animations:
            image = image[0]
        if channels not in (None, 0, 3):
            raise ValueError(f"decode_image: a GIF has 3 channels, channels={channels} was asked")
    elif head[:2] == b"BM":
        image = decode_bmp(data, channels or 0)
    else:
        raise ValueError(f"decode_image: unknown image format (first bytes {head[:4]!r}): "
                         f"JPEG, PNG, GIF and BMP are supported")
    if dtype == torch.float32:
        scale = 65535.0 if image.dtype == torch.uint16 else 255.0
        return image.to(torch.int32 if image.dtype == torch.uint16 else image.dtype).to(torch.float32) / scale
    return image


def _as_image(image: Any, where: str) -> np.ndarray:
    array = image.detach().cpu().numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
    if array.ndim != 3 or array.shape[2] not in (1, 2, 3, 4):
        raise ValueError(f"{where} takes an [H, W, C] image with 1 to 4 channels, got shape {list(array.shape)}")
    return array


def encode_jpeg(image: Any, format: str = "", quality: int = 95, progressive: bool = False,
                optimize_size: bool = False, chroma_downsampling: bool = True, density_unit: str = "in",
                x_density: int = 300, y_density: int = 300, xmp_metadata: str = "",
                name: Optional[str] = None) -> bytes:
    """A uint8 ``[H, W, 1 or 3]`` image as JPEG bytes (``tf.io.encode_jpeg``; libjpeg's quality tables)."""
    from PIL import Image

    array = _as_image(image, "encode_jpeg")
    if array.dtype != np.uint8 or array.shape[2] not in (1, 3):
        raise ValueError(f"encode_jpeg takes uint8 images with 1 or 3 channels, got {array.dtype} with "
                         f"{array.shape[2]}")
    picture = Image.fromarray(np.ascontiguousarray(array[:, :, 0] if array.shape[2] == 1 else array))
    out = io.BytesIO()
    picture.save(out, "JPEG", quality=int(quality), progressive=progressive, optimize=optimize_size,
                 subsampling=2 if chroma_downsampling else 0, dpi=(x_density, y_density))
    return out.getvalue()


def encode_png(image: Any, compression: int = -1, name: Optional[str] = None) -> bytes:
    """A uint8 (1-4 channels) or uint16 (1 channel) ``[H, W, C]`` image as PNG bytes (``tf.io.encode_png``)."""
    from PIL import Image

    if isinstance(image, torch.Tensor) and image.dtype == torch.uint16:
        image = image.view(torch.int16).numpy().view(np.uint16)
    array = _as_image(image, "encode_png")
    level = 6 if compression is None or compression < 0 else int(compression)
    if array.dtype == np.uint16:
        if array.shape[2] != 1:
            raise ValueError("encode_png: 16-bit images must have 1 channel here")
        picture = Image.fromarray(np.ascontiguousarray(array[:, :, 0]).astype("<u2"))  # mode I;16
    elif array.dtype == np.uint8:
        picture = Image.fromarray(np.ascontiguousarray(array[:, :, 0] if array.shape[2] == 1 else array))
    else:
        raise ValueError(f"encode_png takes uint8 or uint16 images, got {array.dtype}")
    out = io.BytesIO()
    picture.save(out, "PNG", compress_level=level)
    return out.getvalue()
