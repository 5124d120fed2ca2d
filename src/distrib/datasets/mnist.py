"""MNIST-shaped handwritten digits that need no download.

`load_data()` mirrors ``tf.keras.datasets.mnist.load_data()``: it returns
``(x_train, y_train), (x_test, y_test)`` as uint8 images of 28×28 and uint8
labels, as Keras does (torch's own ``F.cross_entropy`` wants int64 labels:
``y_train.astype("int64")``; distrib's losses and metrics take either). Its
source, in order:

1. ``path`` or the ``DISTRIB_MNIST`` environment variable pointing at a real
   MNIST file: Keras's ``mnist.npz`` (keys ``x_train``, ``y_train``,
   ``x_test``, ``y_test``) or a directory holding the four IDX files
   (``train-images-idx3-ubyte`` etc., optionally ``.gz``);
2. otherwise the 1,797 real handwritten digits bundled with scikit-learn
   (``pip install scikit-learn``, distrib's ``datasets`` extra; without it, one line says so;
   read from its data file without importing scikit-learn)
   (8×8, 17 grey levels), scaled to 20×20 and centred in 28×28 like MNIST,
   split 1,500 / 297 into train and test writers, then brought to MNIST's
   60,000 / 10,000 images by shifting each digit by up to 3 pixels
   (deterministic, so every worker sees the same data).

Example:
    >>> (x_train, y_train), (x_test, y_test) = load_data()
    >>> x_train.shape, x_train.dtype, y_train.dtype, int(y_train.max())
    ((60000, 28, 28), dtype('uint8'), dtype('uint8'), 9)
"""
from __future__ import annotations

import gzip
import importlib.util
import os
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from distrib.utils.optional import require
from distrib.utils.public_names import public_dir

__all__ = ["load_data"]


def __dir__() -> "list[str]":
    return public_dir(globals(), __all__)


Split = Tuple[np.ndarray, np.ndarray]


def load_data(path: Optional[str] = None) -> Tuple[Split, Split]:
    """Return ``(x_train, y_train), (x_test, y_test)``; see the module docstring for sources."""
    source = path or os.environ.get("DISTRIB_MNIST")
    if source:
        return _load_real(Path(source))
    return _load_sklearn_digits()


def _load_real(path: Path) -> Tuple[Split, Split]:
    if path.is_dir():
        def idx(stem: str) -> np.ndarray:
            for name in (stem, stem + ".gz"):
                f = path / name
                if f.exists():
                    return _read_idx(f)
            raise FileNotFoundError(f"MNIST directory {path} has no {stem}[.gz]")
        return ((idx("train-images-idx3-ubyte"), idx("train-labels-idx1-ubyte")),
                (idx("t10k-images-idx3-ubyte"), idx("t10k-labels-idx1-ubyte")))
    if not path.exists():
        raise FileNotFoundError(f"MNIST file {path} (from DISTRIB_MNIST or path=) does not exist")
    with np.load(path, allow_pickle=False) as data:
        missing = {"x_train", "y_train", "x_test", "y_test"} - set(data.files)
        if missing:
            raise ValueError(f"{path} is not Keras's mnist.npz: missing arrays {sorted(missing)}")
        return ((data["x_train"], data["y_train"].astype(np.uint8)),
                (data["x_test"], data["y_test"].astype(np.uint8)))


def _read_idx(path: Path) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file (bad magic number)")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path} is truncated: header says {dims}, found {data.size} bytes of data")
    return data.reshape(dims)


def _digits() -> Tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 digits as ``(images [n, 8, 8] float64, labels)``.

    Read from the file scikit-learn bundles, as its ``load_digits`` reads it, without
    importing scikit-learn (1-3 s in a fresh process); through ``load_digits`` where
    the file is not where that layout puts it.
    """
    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    bundled = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz" if spec and spec.origin else None
    if bundled is not None and bundled.is_file():
        with gzip.open(bundled, "rt", encoding="utf-8") as f:
            data = np.loadtxt(f, delimiter=",")
        return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
    digits = require("sklearn.datasets", extra="datasets",
                     purpose="distrib.datasets.mnist (offline digits; or set DISTRIB_MNIST="
                             "/path/to/mnist.npz)").load_digits()
    return digits.images, digits.target


def _load_sklearn_digits() -> Tuple[Split, Split]:
    import torch
    import torch.nn.functional as F

    digit_images, targets = _digits()
    small = torch.from_numpy(digit_images.astype(np.float32) / 16.0).unsqueeze(1)
    big = F.interpolate(small, size=(20, 20), mode="bilinear", align_corners=False).squeeze(1)
    images = np.zeros((len(big), 28, 28), dtype=np.uint8)
    images[:, 4:24, 4:24] = (big.clamp(0, 1).numpy() * 255).round().astype(np.uint8)
    labels = targets.astype(np.uint8)
    train = _shifted(images[:1500], labels[:1500], 60000, seed=0)
    test = _shifted(images[1500:], labels[1500:], 10000, seed=1)
    return train, test


def _shifted(images: np.ndarray, labels: np.ndarray, count: int, seed: int) -> Split:
    """``count`` copies of ``images`` cycled in order, each moved by a seeded shift of ≤3 pixels."""
    rng = np.random.default_rng(seed)
    base = np.arange(count) % len(images)
    shifts = rng.integers(-3, 4, size=(count, 2))
    out = images[base]
    for dy in range(-3, 4):
        for dx in range(-3, 4):
            rows = np.nonzero((shifts[:, 0] == dy) & (shifts[:, 1] == dx))[0]
            if len(rows):
                out[rows] = np.roll(out[rows], shift=(dy, dx), axis=(1, 2))
    return out, labels[base]
