"""What the TensorFlow runs of the tutorials share: strategies, the ports' seeded weights, the MNIST subset.

Used with the TensorFlow virtual environment only (by ``tutorial_*_tf.py``).

* `strategy(mode)`: ``"2"`` is ``MirroredStrategy`` on 2 virtual CPUs,
  ``"1"`` on one, ``"workers"`` ``MultiWorkerMirroredStrategy`` (``TF_CONFIG``).
* `set_seeded_weights(model, seed, layouts)`: the arrays
  ``src/distrib/testing/seeded_weights.py`` draws for the PyTorch port (that
  file is loaded by path: it needs only NumPy), turned into Keras's layout.
  ``layouts`` names, per PyTorch parameter in order, how: ``"conv"`` (OIHW ->
  HWIO), ``"dense"`` ((out, in) -> (in, out)), ``("dense_after", (C, H, W))``
  (a Dense after a Flatten of channels-first ``C, H, W`` features: Keras
  flattens ``H, W, C``), ``"same"`` (biases, embeddings).
* `mnist(path)`: the ``(x_train, y_train), (x_test, y_test)`` subset
  `generate_tutorials.py` wrote from `distrib.datasets.mnist`.
"""
import importlib.util
import json
from pathlib import Path

import numpy as np
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[2]


def strategy(mode):
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if mode == "workers":
        return tf.distribute.MultiWorkerMirroredStrategy()
    n = int(mode)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)])


def _seeded_module():
    spec = importlib.util.spec_from_file_location(
        "seeded_weights", ROOT / "src" / "distrib" / "testing" / "seeded_weights.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torch_shape(keras_shape, layout):
    if layout == "conv":
        h, w, i, o = keras_shape
        return (o, i, h, w)
    if layout == "dense" or isinstance(layout, tuple):
        return tuple(reversed(keras_shape))
    return tuple(keras_shape)


def _to_keras(array, layout):
    if layout == "conv":
        return array.transpose(2, 3, 1, 0)
    if layout == "dense":
        return array.T
    if isinstance(layout, tuple):
        c, h, w = layout[1]
        return array.reshape(-1, c, h, w).transpose(2, 3, 1, 0).reshape(h * w * c, -1)
    return array


def set_seeded_weights(model, seed, layouts):
    """Give the built Keras ``model`` the weights the PyTorch port gets from ``seed``."""
    weights = model.get_weights()
    if len(weights) != len(layouts):
        raise ValueError(f"{len(weights)} Keras weights, {len(layouts)} layouts")
    shapes = [_torch_shape(w.shape, layout) for w, layout in zip(weights, layouts)]
    arrays = _seeded_module().seeded_arrays(shapes, seed)
    model.set_weights([_to_keras(a, layout) for a, layout in zip(arrays, layouts)])


def mnist(path):
    with np.load(path) as data:
        return (data["x_train"], data["y_train"]), (data["x_test"], data["y_test"])


def emit(record):
    print("RESULT " + json.dumps(record), flush=True)
