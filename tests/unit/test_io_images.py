"""Image decoding and encoding in distrib.io against TensorFlow 2.21's recorded pixels.

TF encoded small JPEGs (4:2:0 and 4:4:4 color, gray) and PNGs (gray, RGB, RGBA,
16-bit gray and color) and recorded its decodings (tests/tf_reference/generate_tfrecord_io.py).
Pixel-exact for every JPEG decode (simplejpeg's and Pillow's libjpeg-turbo is TF's
JPEG library, asked for TF's settings) and every PNG decode but one stated tolerance:
TF's (libpng's) RGB -> gray weights for PNG channels=1 (1 level).
"""
from pathlib import Path

import numpy as np
import pytest
import torch

from distrib import io as dio

REF_DIR = Path(__file__).resolve().parents[1] / "data" / "tf_reference" / "tfrecord_io"
PIXELS = np.load(REF_DIR / "pixels.npz")
DECODED = sorted(k for k in PIXELS.files if not k.startswith("source:"))


def _numpy(t):
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.uint16 else t.numpy()


def _decode(key):
    name, op, arg = (key.split(":") + [""])[:3]
    data = dio.read_file(REF_DIR / name)
    if op == "decode_image":
        return dio.decode_image(data)
    if op == "decode_png16":
        return dio.decode_png(data, dtype=torch.uint16)
    if op == "decode_png":
        return dio.decode_png(data, channels=int(arg))
    kwargs = ({"ratio": 2} if arg == "ratio2" else {"dct_method": arg} if arg.startswith("INTEGER")
              else {"fancy_upscaling": False} if arg == "no_fancy" else {"channels": int(arg)})
    return dio.decode_jpeg(data, **kwargs)


def _tolerance(key):
    """0 (exact) unless the module docstring names the case."""
    name, op, arg = (key.split(":") + [""])[:3]
    if name in ("rgb.png", "rgba.png", "rgb16.png") and op == "decode_png" and arg == "1":
        return 1   # libpng's RGB -> gray weights
    return 0


@pytest.mark.parametrize("key", [k for k in DECODED if k != "rgb16.png:decode_png16:0"])
def test_decoded_pixels_equal_tf_within_the_stated_tolerance(key):
    got, want = _numpy(_decode(key)), PIXELS[key]
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max() <= _tolerance(key), (key, diff.max())
    if _tolerance(key):
        assert diff.mean() < 1.0


def test_the_exact_cases_include_every_jpeg_decoding_and_every_png_but_gray_of_color():
    exact = [k for k in DECODED if _tolerance(k) == 0]
    assert [k for k in DECODED if ".jpg:" in k and k not in exact] == []
    assert "gray_q90.jpg:decode_jpeg:0" in exact and "rgb_q95_444.jpg:decode_jpeg:0" in exact
    assert "rgb_q90.jpg:decode_jpeg:0" in exact and "rgb_q90.jpg:decode_image" in exact  # TF's default, 4:2:0
    assert "rgb_q90.jpg:decode_jpeg:INTEGER_ACCURATE" in exact and "rgb_q90.jpg:decode_jpeg:ratio2" in exact
    assert "gray16.png:decode_png16:0" in exact and "rgba.png:decode_png:0" in exact


def test_sixteen_bit_gray_keeps_its_values_and_reads_as_uint8_high_bytes():
    data = dio.read_file(REF_DIR / "gray16.png")
    wide = _numpy(dio.decode_png(data, dtype=torch.uint16))
    assert np.array_equal(wide, PIXELS["source:gray16"])
    assert np.array_equal(_numpy(dio.decode_png(data)), (PIXELS["source:gray16"] >> 8).astype(np.uint8))


def test_sixteen_bit_color_as_uint16_is_a_clear_error():
    with pytest.raises(ValueError, match="16-bit color PNGs read as uint16 are not supported"):
        dio.decode_png(dio.read_file(REF_DIR / "rgb16.png"), dtype=torch.uint16)


@pytest.mark.parametrize("source", ["rgb", "gray", "rgba"])
def test_png_round_trips_exactly(source):
    pixels = torch.from_numpy(PIXELS[f"source:{source}"])
    assert torch.equal(dio.decode_png(dio.encode_png(pixels)), pixels)
    assert torch.equal(dio.decode_image(dio.encode_png(pixels)), pixels)


def test_png_of_tf_pixels_decodes_to_tf_pixels_and_sixteen_bits_round_trip():
    assert torch.equal(dio.decode_png(dio.read_file(REF_DIR / "rgba.png")), torch.from_numpy(PIXELS["source:rgba"]))
    wide = torch.from_numpy(PIXELS["source:gray16"].view(np.int16)).view(torch.uint16)
    back = dio.decode_png(dio.encode_png(wide), dtype=torch.uint16)
    assert np.array_equal(_numpy(back), PIXELS["source:gray16"])


@pytest.mark.parametrize("name,source,kwargs", [("rgb_q90.jpg", "rgb", {"quality": 90}),
                                                ("rgb_q95_444.jpg", "rgb", {"quality": 95, "chroma_downsampling": False}),
                                                ("gray_q90.jpg", "gray", {"quality": 90})])
def test_encode_jpeg_decodes_to_what_tf_own_jpeg_decodes_to(name, source, kwargs):
    mine = dio.encode_jpeg(torch.from_numpy(PIXELS[f"source:{source}"]), **kwargs)
    assert dio.is_jpeg(mine)
    got = _numpy(dio.decode_jpeg(mine, dct_method="INTEGER_ACCURATE"))
    want = PIXELS[f"{name}:decode_jpeg:INTEGER_ACCURATE"]
    assert np.array_equal(got, want)  # libjpeg-turbo's quality tables and sampling, as TF's encoder


def test_decode_image_reads_gif_and_bmp_frames_in_tf_layout():
    from PIL import Image
    import io

    frames = [Image.new("RGB", (5, 4), color) for color in ((255, 0, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:])
    gif = dio.decode_image(out.getvalue())
    assert gif.shape == (2, 4, 5, 3) and gif[1, 0, 0].tolist() == [0, 0, 255]
    assert dio.decode_image(out.getvalue(), expand_animations=False).shape == (4, 5, 3)
    out = io.BytesIO()
    frames[0].save(out, "BMP")
    assert dio.decode_image(out.getvalue()).shape == (4, 5, 3)
    as_float = dio.decode_image(dio.encode_png(torch.full((2, 2, 1), 255, dtype=torch.uint8)), dtype=torch.float32)
    assert as_float.dtype == torch.float32 and as_float.max().item() == 1.0


def test_tf_default_4_2_0_decode_is_the_fast_idct_with_fancy_upsampling_not_the_accurate_one():
    data = dio.read_file(REF_DIR / "rgb_q90.jpg")
    default, accurate = _numpy(dio.decode_jpeg(data)), _numpy(dio.decode_jpeg(data, dct_method="INTEGER_ACCURATE"))
    assert np.array_equal(default, PIXELS["rgb_q90.jpg:decode_jpeg:0"])
    assert np.array_equal(accurate, PIXELS["rgb_q90.jpg:decode_jpeg:INTEGER_ACCURATE"])
    assert not np.array_equal(default, accurate)  # the two settings are told apart by the data


def test_cmyk_and_progressive_jpegs_decode_through_the_fallback_or_turbojpeg():
    from PIL import Image
    import io

    rgb = PIXELS["source:rgb"]
    out = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(out, "JPEG", quality=95)
    cmyk = dio.decode_jpeg(out.getvalue())
    assert cmyk.shape == (rgb.shape[0], rgb.shape[1], 3) and cmyk.dtype == torch.uint8
    assert dio.decode_jpeg(out.getvalue(), channels=1).shape == (rgb.shape[0], rgb.shape[1], 1)
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, "JPEG", quality=95, progressive=True)
    progressive = _numpy(dio.decode_jpeg(out.getvalue(), dct_method="INTEGER_ACCURATE"))
    pillow = np.array(Image.open(io.BytesIO(out.getvalue())))  # Pillow's ISLOW decode, same library
    assert np.array_equal(progressive, pillow)


def test_garbage_and_wrong_formats_are_one_line_errors():
    for call, data in [(dio.decode_jpeg, b"\x89PNG\r\n\x1a\n" + b"\0" * 20), (dio.decode_png, b"garbage"),
                       (dio.decode_image, b"garbage!")]:
        with pytest.raises(ValueError) as info:
            call(data)
        assert "\n" not in str(info.value) and call.__name__ in str(info.value)
    truncated = dio.read_file(REF_DIR / "rgb_q90.jpg")[:200]
    with pytest.raises(ValueError, match="decode_jpeg: .*JPEG image"):
        dio.decode_jpeg(truncated)
    with pytest.raises(TypeError, match="read_file"):
        dio.decode_jpeg("cat.jpg")


@pytest.mark.parametrize("seed", range(3))
def test_damaged_jpegs_decode_or_raise_one_line_value_errors(seed):
    good = dio.read_file(REF_DIR / "rgb_q90.jpg")
    rng = np.random.default_rng(seed)
    for _ in range(60):
        data = bytearray(good)
        for at in rng.integers(2, len(data), size=int(rng.integers(1, 6))):
            data[at] = int(rng.integers(0, 256))
        data = bytes(data[: int(rng.integers(3, len(data) + 1))]) if rng.random() < 0.3 else bytes(data)
        for channels in (0, 1, 3):
            try:
                pixels = dio.decode_jpeg(data, channels=channels)
            except ValueError as exc:
                assert "\n" not in str(exc) and str(exc).startswith("decode_jpeg: ")
            else:
                assert pixels.dtype == torch.uint8 and pixels.dim() == 3


def test_a_forged_huge_size_claim_is_refused_before_allocating():
    data = bytearray(dio.read_file(REF_DIR / "rgb_q90.jpg"))
    at = data.index(b"\xff\xc0") + 5  # SOF0: length (2), precision (1), then height and width
    data[at:at + 4] = (60000).to_bytes(2, "big") + (60000).to_bytes(2, "big")
    with pytest.raises(ValueError, match=r"decode_jpeg: the JPEG claims 60000x60000 pixels"):
        dio.decode_jpeg(bytes(data))
