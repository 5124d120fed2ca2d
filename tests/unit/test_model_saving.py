"""model.save / distrib.models.load_model: a compiled model that continues training bit for bit."""
from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
import torch

import distrib
from distrib.checkpoint.files import storage
from distrib.checkpoint.files.format import UnsafeFileError
from distrib.training.saving.serialization import SerializationError

X = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
Y = (np.abs(X[:, 1] * 2).astype(np.int64) % 3)


@distrib.saving.register_serializable(package="tests")
def build_net(hidden=8):
    """A registered builder, recorded by path: a file may name it, load_model may call it."""
    return torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 3))


def build_and_compile():
    """Like the seeds' build_and_compile_cnn_model: returns a compiled distrib.Model."""
    model = distrib.Model(build_net(), builder=f"{__name__}:build_net")
    model.compile(optimizer="sgd", loss="mse")
    return model


class NoArgNet(torch.nn.Module):
    """Importable and constructible without arguments: recorded by its class."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


def _trained(module, optimizer="adam", builder=None, builder_kwargs=None):
    torch.manual_seed(0)
    model = distrib.Model(module, builder=builder, builder_kwargs=builder_kwargs)
    model.compile(optimizer=optimizer, loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(X, Y, batch_size=8, epochs=1, verbose=0)
    return model


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop", "torch-sgd-momentum"])
def test_round_trip_continues_training_bit_for_bit(tmp_path, optimizer):
    torch.manual_seed(0)
    module = build_net(hidden=6)
    opt = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9) if optimizer == "torch-sgd-momentum" else optimizer
    model = _trained(module, opt, builder=f"{__name__}:build_net", builder_kwargs={"hidden": 6})
    model.save(str(tmp_path / "m"))
    loaded = distrib.models.load_model(str(tmp_path / "m"))
    assert loaded.compiled and loaded.metrics_names == model.metrics_names
    assert type(loaded.torch_optimizer) is type(model.torch_optimizer)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    h1 = model.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    h2 = loaded.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert h1.history == h2.history
    assert loaded.train_loop_state.global_step == model.train_loop_state.global_step


def test_saved_directory_is_json_and_safetensors_only(tmp_path):
    model = _trained(NoArgNet())
    model.save(str(tmp_path / "m"))
    names = sorted(os.listdir(tmp_path / "m"))
    assert names == ["COMPLETE", "MANIFEST.json", "model.json", "state.safetensors"]
    config = json.loads((tmp_path / "m" / "model.json").read_text())
    assert config["builder"] == f"{__name__}:NoArgNet"  # inferred from the importable class
    assert config["compile"]["optimizer"] == {"name": "adam"}
    assert config["compile"]["loss"]["class"] == "distrib.losses.SparseCategoricalCrossentropy"
    assert storage.is_complete(str(tmp_path / "m"))
    loaded = distrib.models.load_model(str(tmp_path / "m"))
    np.testing.assert_array_equal(loaded.predict(X, verbose=0), model.predict(X, verbose=0))


def test_builder_may_return_a_compiled_model_and_compile_false_skips_compiling(tmp_path):
    model = build_and_compile()
    model.save(str(tmp_path / "m"))
    loaded = distrib.models.load_model(str(tmp_path / "m"))
    assert loaded.compiled and isinstance(loaded.torch_optimizer, distrib.optimizers.KerasSGD)
    raw = distrib.models.load_model(str(tmp_path / "m"), compile=False)
    assert not raw.compiled
    np.testing.assert_array_equal(raw.get_weights()[0], model.get_weights()[0])


def test_unknown_architecture_warns_at_save_and_needs_a_builder_at_load(tmp_path):
    class Local(torch.nn.Module):  # not importable
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x)
    model = _trained(Local())
    with pytest.warns(UserWarning, match="defined inside a function.*custom_objects"):
        model.save(str(tmp_path / "m"))
    with pytest.raises(SerializationError, match=r"Local' was defined inside a function.*custom_objects.*builder="):
        distrib.models.load_model(str(tmp_path / "m"))
    by_name = distrib.models.load_model(str(tmp_path / "m"), custom_objects={"Local": Local})
    np.testing.assert_array_equal(by_name.get_weights()[0], model.get_weights()[0])
    loaded = distrib.models.load_model(str(tmp_path / "m"), builder=Local)
    np.testing.assert_array_equal(loaded.get_weights()[0], model.get_weights()[0])
    with pytest.raises(SerializationError, match="does not match the saved weights"):
        distrib.models.load_model(str(tmp_path / "m"), builder=f"{__name__}:build_net")


def test_a_pickle_payload_is_refused(tmp_path):
    model = _trained(NoArgNet())
    model.save(str(tmp_path / "m"))
    config = (tmp_path / "m" / "model.json").read_bytes()
    buffer = io.BytesIO()
    torch.save({"module": model.module.state_dict()}, buffer)
    with storage.AtomicDirectory(str(tmp_path / "evil")) as d:  # a complete, checksummed directory
        d.write_bytes("model.json", config)
        d.write_bytes("state.safetensors", buffer.getvalue())
    with pytest.raises(UnsafeFileError, match="pickle"):
        distrib.models.load_model(str(tmp_path / "evil"))


def test_damaged_or_partial_saves_are_refused(tmp_path):
    model = _trained(NoArgNet())
    model.save(str(tmp_path / "m"))
    state = tmp_path / "m" / "state.safetensors"
    data = bytearray(state.read_bytes())
    data[-3] ^= 0xFF
    state.write_bytes(bytes(data))
    with pytest.raises(storage.CorruptCheckpointError, match="state.safetensors"):
        distrib.models.load_model(str(tmp_path / "m"))
    os.remove(tmp_path / "m" / "COMPLETE")
    with pytest.raises(storage.CorruptCheckpointError, match="incomplete"):
        distrib.models.load_model(str(tmp_path / "m"))


def test_unsavable_compile_arguments_fail_before_writing(tmp_path):
    model = distrib.Model(NoArgNet())
    model.compile(optimizer="sgd", loss=lambda y_true, y_pred: ((y_true - y_pred) ** 2).mean(-1))
    with pytest.raises((SerializationError, ValueError), match="lambda|cannot be saved"):
        model.save(str(tmp_path / "m"))
    assert not (tmp_path / "m").exists()


def test_save_refuses_to_overwrite_when_asked(tmp_path):
    model = _trained(NoArgNet())
    model.save(str(tmp_path / "m"))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        model.save(str(tmp_path / "m"), overwrite=False)
    model.save(str(tmp_path / "m"))  # overwrite (the default) replaces it atomically


def test_save_and_load_through_an_fsspec_url():
    model = _trained(NoArgNet())
    model.save("memory://saved/keras-model")
    assert storage.is_complete("memory://saved/keras-model")
    loaded = distrib.models.load_model("memory://saved/keras-model")
    np.testing.assert_array_equal(loaded.predict(X, verbose=0), model.predict(X, verbose=0))
