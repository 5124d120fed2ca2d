"""Keras 3 models (torch backend) through Model.save / load_model / save_weights / load_weights.

Keras names layers uniquely per process (``dense_2`` once another model was
built), so distrib saves a Keras model's variables by position and its
architecture with Keras's own serialisation.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("KERAS_BACKEND", "torch")  # before the first import of keras
keras = pytest.importorskip("keras")

import distrib  # noqa: E402
from distrib.training.saving.serialization import SerializationError  # noqa: E402
from distrib.training.saving.weights import WeightsMismatchError  # noqa: E402

if keras.backend.backend() != "torch":
    pytest.skip("Keras runs on another backend (KERAS_BACKEND must be torch)", allow_module_level=True)

X = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
Y = X @ np.ones((4, 1), np.float32)


def build():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="relu"),
                             keras.layers.BatchNormalization(), keras.layers.Dense(1)])


def _trained():
    model = distrib.Model(build())
    model.compile(optimizer="adam", loss="mse")
    model.fit(X, Y, batch_size=8, epochs=2, verbose=0)
    return model


def _predict(model):
    return model.predict(X, verbose=0)


def test_save_and_load_model_round_trip_is_not_an_empty_sequential(tmp_path):
    model = _trained()
    model.save(str(tmp_path / "m"))
    config = json.loads((tmp_path / "m" / "model.json").read_text())
    assert config["builder"] is None and config["keras"]["class_name"] == "Sequential"
    build()                                                   # another Keras model: names shift
    loaded = distrib.models.load_model(str(tmp_path / "m"))
    assert len(loaded.module.layers) == 3
    np.testing.assert_allclose(_predict(loaded), _predict(model), rtol=1e-6)
    loaded.fit(X, Y, batch_size=8, epochs=1, verbose=0, shuffle=False)   # compiled, optimizer state restored
    model.fit(X, Y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    np.testing.assert_allclose(_predict(loaded), _predict(model), rtol=1e-5, atol=1e-6)


def test_weights_and_builder_load_after_another_keras_model_was_built(tmp_path):
    model = _trained()
    model.save_weights(str(tmp_path / "w"))
    model.save(str(tmp_path / "m"))
    build()
    other = distrib.Model(build())                            # dense_4/... instead of dense/...
    assert set(other.module.state_dict()) != set(model.module.state_dict())
    other.load_weights(str(tmp_path / "w"))
    np.testing.assert_allclose(_predict(other), _predict(model), rtol=1e-6)
    rebuilt = distrib.models.load_model(str(tmp_path / "m"), builder=build)
    np.testing.assert_allclose(_predict(rebuilt), _predict(model), rtol=1e-6)
    small = distrib.Model(keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)]))
    with pytest.raises(WeightsMismatchError, match="holds 8 Keras variables, the model has 2"):
        small.load_weights(str(tmp_path / "w"))


def test_dot_keras_file_is_written_and_read_by_keras(tmp_path):
    model = _trained()
    path = str(tmp_path / "model.keras")
    model.save(path)
    assert keras.saving.load_model(path, compile=False).count_params() == model.module.count_params()
    loaded = distrib.models.load_model(path)
    np.testing.assert_allclose(_predict(loaded), _predict(model), rtol=1e-6)


def test_a_torch_module_saved_to_a_dot_keras_path_loads_back(tmp_path):
    """The seeds write ``model.save("....keras")``: a torch module gets distrib's format at that path."""
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Linear(4, 1))
    path = str(tmp_path / "torch.keras")
    model.save(path)
    loaded = distrib.models.load_model(path)
    x = torch.randn(3, 4)
    torch.testing.assert_close(loaded.module(x), model.module(x))


class Subclassed(keras.Model):
    """A subclassed Keras model without get_config: Keras cannot serialise its architecture."""

    def __init__(self, units):
        super().__init__()
        self.dense = keras.layers.Dense(units)

    def call(self, x):
        return self.dense(x)


def test_unserialisable_keras_model_warns_and_needs_a_builder(tmp_path):
    model = distrib.Model(Subclassed(2))
    model.module(X[:2])
    with pytest.warns(UserWarning, match="Keras model cannot be serialised"):
        model.save(str(tmp_path / "m"))
    with pytest.raises(SerializationError, match="builder="):
        distrib.models.load_model(str(tmp_path / "m"))

    def builder():
        fresh = Subclassed(2)
        fresh(X[:2])
        return fresh
    loaded = distrib.models.load_model(str(tmp_path / "m"), builder=builder)
    np.testing.assert_allclose(_predict(loaded), _predict(model), rtol=1e-6)
