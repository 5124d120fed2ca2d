"""The guide's one-Dense-layer Keras snippet (examples/guide_keras.py) under the default strategy."""
from __future__ import annotations

import importlib.util
import os

import numpy as np

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def _load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_guide_snippet_trains_the_one_layer_model_to_the_target(capsys):
    model, history = _load("guide_keras").main(["--strategy", "default"])
    out = capsys.readouterr().out
    assert "Epoch 2/2" in out and "num_replicas_in_sync: 1" in out
    assert history.history["loss"][-1] < 0.05  # inputs and targets are all ones: w + b -> 1
    assert model.predict(np.ones((3, 1)), verbose=0).round(1).tolist() == [[1.0]] * 3


def test_mnist_fit_builds_the_tutorial_model():
    mnist_fit = _load("mnist_fit")
    model = mnist_fit.build_and_compile_cnn_model()
    assert model.count_params() == 2_770_634  # the tutorial CNN's parameter count
    assert model.metrics_names == ["loss", "accuracy"]
    assert model.builder is None  # standard torch.nn layers: load_model rebuilds them from the architecture
