"""Datasets without TensorFlow: small ones that work offline (``distrib.datasets.mnist.load_data()``) and
TFDS-prepared directories (`load_tfds_dir`)."""
from distrib.datasets import mnist
from distrib.datasets.tfds_dir import load_tfds_dir
from distrib.datasets.tfds_info import TfdsDirError

__all__ = ["mnist", "load_tfds_dir", "TfdsDirError"]
