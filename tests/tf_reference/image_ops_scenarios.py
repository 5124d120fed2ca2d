"""``tf.image`` deterministic ops, written once for TensorFlow and for ``distrib.image`` (issue 39).

``scenarios(I, ops)`` returns name -> a zero-argument function computing one
op on fixed inputs (``I`` is ``tf.image`` or ``distrib.image``; ``ops`` makes
the inputs and names dtypes). `generate_image_ops.py` runs them on
TensorFlow 2.21 and `tests/unit/test_image_ops_tf.py` replays them on distrib.
"""
from typing import Any, Callable, Dict

import numpy as np

__all__ = ["scenarios", "inputs"]


def inputs() -> Dict[str, np.ndarray]:
    """The fixed images: uint8 and float32 [5, 6, 3], a float32 batch [2, 5, 6, 3], a grey [4, 4, 1]."""
    rng = np.random.default_rng(39)
    return {"u8": rng.integers(0, 256, (5, 6, 3)).astype(np.uint8),
            "f32": rng.random((5, 6, 3)).astype(np.float32),
            "batch": rng.random((2, 5, 6, 3)).astype(np.float32),
            "grey": rng.random((4, 4, 1)).astype(np.float32),
            "wide": (rng.random((5, 6, 3)) * 1.6 - 0.3).astype(np.float32)}


def scenarios(I: Any, ops: Any) -> Dict[str, Callable[[], Any]]:
    x = {k: ops.tensor(v) for k, v in inputs().items()}
    return {
        "flip_left_right": lambda: I.flip_left_right(x["u8"]),
        "flip_left_right_batch": lambda: I.flip_left_right(x["batch"]),
        "flip_up_down": lambda: I.flip_up_down(x["f32"]),
        "flip_up_down_batch": lambda: I.flip_up_down(x["batch"]),
        "rot90_1": lambda: I.rot90(x["u8"]),
        "rot90_3": lambda: I.rot90(x["u8"], k=3),
        "rot90_batch_2": lambda: I.rot90(x["batch"], k=2),
        "transpose": lambda: I.transpose(x["f32"]),
        "central_crop_half": lambda: I.central_crop(x["f32"], 0.5),
        "central_crop_0_7": lambda: I.central_crop(x["u8"], 0.7),
        "central_crop_batch": lambda: I.central_crop(x["batch"], 0.6),
        "crop_to_bounding_box": lambda: I.crop_to_bounding_box(x["u8"], 1, 2, 3, 3),
        "crop_to_bounding_box_too_big": lambda: I.crop_to_bounding_box(x["u8"], 3, 2, 3, 3),
        "pad_to_bounding_box": lambda: I.pad_to_bounding_box(x["u8"], 1, 2, 8, 9),
        "pad_to_bounding_box_batch": lambda: I.pad_to_bounding_box(x["batch"], 0, 1, 6, 8),
        "resize_with_crop_or_pad_pad": lambda: I.resize_with_crop_or_pad(x["u8"], 8, 9),
        "resize_with_crop_or_pad_crop": lambda: I.resize_with_crop_or_pad(x["u8"], 2, 3),
        "resize_with_crop_or_pad_mixed": lambda: I.resize_with_crop_or_pad(x["f32"], 8, 3),
        "resize_with_crop_or_pad_odd": lambda: I.resize_with_crop_or_pad(x["batch"], 4, 9),
        "resize_bilinear_up": lambda: I.resize(x["f32"], [8, 9]),
        "resize_bilinear_down": lambda: I.resize(x["f32"], [3, 4]),
        "resize_bilinear_uint8": lambda: I.resize(x["u8"], [7, 4]),
        "resize_bilinear_batch": lambda: I.resize(x["batch"], [4, 7]),
        "resize_bilinear_antialias_down": lambda: I.resize(x["f32"], [2, 3], antialias=True),
        "resize_nearest_up": lambda: I.resize(x["u8"], [8, 9], method="nearest"),
        "resize_nearest_down": lambda: I.resize(x["f32"], [3, 4], method="nearest"),
        "resize_preserve_aspect_ratio": lambda: I.resize(x["f32"], [10, 8], preserve_aspect_ratio=True),
        "convert_uint8_to_float32": lambda: I.convert_image_dtype(x["u8"], ops.dtype("float32")),
        "convert_float32_to_uint8": lambda: I.convert_image_dtype(x["f32"], ops.dtype("uint8")),
        "convert_float32_to_uint8_saturate": lambda: I.convert_image_dtype(x["wide"], ops.dtype("uint8"),
                                                                           saturate=True),
        "convert_uint8_to_int32": lambda: I.convert_image_dtype(x["u8"], ops.dtype("int32")),
        "convert_float32_to_float64": lambda: I.convert_image_dtype(x["f32"], ops.dtype("float64")),
        "adjust_brightness_float": lambda: I.adjust_brightness(x["f32"], 0.2),
        "adjust_brightness_uint8": lambda: I.adjust_brightness(x["u8"], -0.3),
        "adjust_contrast_float": lambda: I.adjust_contrast(x["f32"], 1.7),
        "adjust_contrast_uint8": lambda: I.adjust_contrast(x["u8"], 0.4),
        "adjust_contrast_batch": lambda: I.adjust_contrast(x["batch"], 2.0),
        "per_image_standardization_float": lambda: I.per_image_standardization(x["f32"]),
        "per_image_standardization_uint8": lambda: I.per_image_standardization(x["u8"]),
        "per_image_standardization_batch": lambda: I.per_image_standardization(x["batch"]),
        "per_image_standardization_constant": lambda: I.per_image_standardization(x["grey"] * 0 + 0.5),
        "rgb_to_grayscale_float": lambda: I.rgb_to_grayscale(x["f32"]),
        "rgb_to_grayscale_uint8": lambda: I.rgb_to_grayscale(x["u8"]),
        "grayscale_to_rgb": lambda: I.grayscale_to_rgb(x["grey"]),
    }


def describe(make: Callable[[], Any]) -> Dict[str, Any]:
    """``{"shape", "dtype", "values"}`` of the result, or ``{"error": class name}``."""
    try:
        out = make()
    except Exception as exc:  # the library's own refusal is the behaviour to match
        return {"error": type(exc).__name__}
    array = np.asarray(out.numpy() if hasattr(out, "numpy") else out)
    return {"shape": list(array.shape), "dtype": str(array.dtype),
            "values": array.astype(np.float64).reshape(-1).tolist()}
