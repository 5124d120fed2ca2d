"""``distrib.datasets.mnist.load_data()`` returns what Keras's does: uint8 images and uint8 labels
(issue 39, item 8), from every source."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from distrib.datasets import mnist


def _check(splits):
    (x_train, y_train), (x_test, y_test) = splits
    assert [a.dtype for a in (x_train, y_train, x_test, y_test)] == [np.uint8] * 4
    assert x_train.shape[1:] == (28, 28) and y_train.shape == (len(x_train),)


def test_the_offline_digits_have_keras_dtypes(monkeypatch):
    pytest.importorskip("sklearn")
    monkeypatch.delenv("DISTRIB_MNIST", raising=False)
    _check(mnist.load_data())


def test_a_keras_npz_keeps_uint8_labels(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "mnist.npz"
    np.savez(path, x_train=rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
             y_train=rng.integers(0, 10, 5, dtype=np.uint8), x_test=rng.integers(0, 256, (2, 28, 28), dtype=np.uint8),
             y_test=rng.integers(0, 10, 2, dtype=np.uint8))
    _check(mnist.load_data(str(path)))


def _idx(path, array):
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_idx_files_keep_uint8_labels(tmp_path):
    rng = np.random.default_rng(1)
    for stem, shape in [("train-images-idx3-ubyte", (4, 28, 28)), ("train-labels-idx1-ubyte", (4,)),
                        ("t10k-images-idx3-ubyte", (3, 28, 28)), ("t10k-labels-idx1-ubyte", (3,))]:
        _idx(tmp_path / f"{stem}.gz", rng.integers(0, 10, shape))
    _check(mnist.load_data(str(tmp_path)))


def test_the_offline_digits_are_load_digits_read_without_importing_scikit_learn(monkeypatch):
    import subprocess
    import sys

    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    images, labels = mnist._digits()
    assert np.array_equal(images, digits.images) and np.array_equal(labels, digits.target)
    # where the bundled file is not found, load_digits itself gives the same arrays
    monkeypatch.setattr(mnist.importlib.util, "find_spec", lambda name: None)
    fallback_images, fallback_labels = mnist._digits()
    assert np.array_equal(fallback_images, images) and np.array_equal(fallback_labels, labels)
    # a fresh process builds the data without importing scikit-learn
    code = ("import sys; from distrib.datasets import mnist; mnist.load_data(); "
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "DISTRIB_MNIST": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
