"""``tf.image`` for input pipelines: the ops a ``Dataset.map`` calls, on ``[H, W, C]`` tensors.

Deterministic ops compute TensorFlow's numbers (tested against TF 2.21's
outputs); random ops draw keyed numbers, the same on every replica and after
a resume (`distrib.image.random_ops`). Images keep TF's channels-last layout:
``image.permute(2, 0, 1)`` gives a torch convolution its ``[C, H, W]``.

Example:
    >>> def augment(image, label):
    ...     image = distrib.image.resize_with_crop_or_pad(image, 36, 36)
    ...     image = distrib.image.random_crop(image, [32, 32, 3])
    ...     image = distrib.image.random_flip_left_right(image)
    ...     return image.permute(2, 0, 1), label
    >>> ds = distrib.data.Dataset.from_tensor_slices((x, y)).map(augment).batch(64)
"""
from distrib.image.color import (adjust_brightness, adjust_contrast, convert_image_dtype, grayscale_to_rgb,
                                 per_image_standardization, rgb_to_grayscale)
from distrib.image.geometry import (central_crop, crop_to_bounding_box, flip_left_right, flip_up_down,
                                    pad_to_bounding_box, resize_with_crop_or_pad, rot90, transpose)
from distrib.image.random_ops import (random_brightness, random_contrast, random_crop, random_flip_left_right,
                                      random_flip_up_down)
from distrib.image.resizing import ResizeMethod, resize

__all__ = ["adjust_brightness", "adjust_contrast", "convert_image_dtype", "grayscale_to_rgb",
           "per_image_standardization", "rgb_to_grayscale", "central_crop", "crop_to_bounding_box",
           "flip_left_right", "flip_up_down", "pad_to_bounding_box", "resize_with_crop_or_pad", "rot90",
           "transpose", "random_brightness", "random_contrast", "random_crop", "random_flip_left_right",
           "random_flip_up_down", "ResizeMethod", "resize"]
