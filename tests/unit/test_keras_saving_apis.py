"""Keras saving APIs in one process: ModelCheckpoint, save/load_weights, load_model without builder,
optimizer.learning_rate as Keras reads it, and the distrib.saved_model export."""
from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
import torch

import distrib
from distrib.checkpoint.files import storage
from distrib.saved_model import ExportError, UnsafeProgramError
from distrib.training.saving.serialization import SerializationError
from distrib.training.saving.weights import WeightsMismatchError

nn = torch.nn
RNG = np.random.default_rng(0)
X = RNG.normal(size=(64, 4)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0).astype(np.int64)


def _net(hidden=8):
    return nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.BatchNorm1d(hidden), nn.Dropout(0.1),
                         nn.Linear(hidden, 3))


def _model(hidden=8, lr=0.05):
    torch.manual_seed(0)
    model = distrib.Model(_net(hidden))
    model.compile(optimizer=distrib.optimizers.Adam(learning_rate=lr),
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


# ------------------------------------------------------------- learning rate
def test_learning_rate_reads_like_a_keras_variable():
    model = _model(lr=0.01)
    lr = model.optimizer.learning_rate
    assert float(lr) == pytest.approx(0.01) and lr.numpy().dtype == np.float32
    assert str(lr.numpy()) == "0.01" and "{:.3f}".format(lr) == "0.010"
    model.optimizer.learning_rate = 0.5
    assert model.torch_optimizer.param_groups[0]["lr"] == 0.5 and model.optimizer.learning_rate.numpy() == 0.5


def test_learning_rate_follows_a_scheduler_during_fit():
    model = _model()
    seen = []

    class PrintLR(distrib.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append(model.optimizer.learning_rate.numpy())

    model.fit(X, Y, batch_size=16, epochs=3, verbose=0, callbacks=[
        distrib.callbacks.LearningRateScheduler(lambda epoch: 1e-3 if epoch < 2 else 1e-4), PrintLR()])
    assert seen == [np.float32(1e-3), np.float32(1e-3), np.float32(1e-4)]


# ------------------------------------------------------------- weights
def test_save_and_load_weights_round_trip_into_a_fresh_model(tmp_path):
    model = _model()
    model.fit(X, Y, batch_size=16, epochs=2, verbose=0)
    model.save_weights(str(tmp_path / "w"))
    assert storage.is_complete(str(tmp_path / "w"))
    fresh = _model()
    fresh.module[0].weight.data.zero_()
    fresh.load_weights(str(tmp_path / "w"))
    np.testing.assert_array_equal(fresh.predict(X, verbose=0), model.predict(X, verbose=0))


@pytest.mark.parametrize("other, message", [
    (lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.BatchNorm1d(8), nn.Dropout(0.1), nn.Linear(8, 4)),
     r"shape mismatches 4\.weight \(file \(3, 8\), model \(4, 8\)\), 4\.bias"),
    (lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.BatchNorm1d(8), nn.Dropout(0.1), nn.Linear(8, 3),
                           nn.Linear(3, 3)),
     r"missing keys 5\.weight, 5\.bias"),
    (lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)),
     r"unexpected keys 2\.running_mean, .* and 2 more; shape mismatches 2\.weight"),
])
def test_load_weights_names_the_mismatched_key(tmp_path, other, message):
    _model().save_weights(str(tmp_path / "w"))
    target = distrib.Model(other())
    with pytest.raises(WeightsMismatchError, match=message) as info:
        target.load_weights(str(tmp_path / "w"))
    assert "\n" not in str(info.value) and str(tmp_path / "w") in str(info.value)


def test_load_weights_refuses_a_pickle_and_a_missing_path(tmp_path):
    torch.save(_net().state_dict(), tmp_path / "w.pt")
    with pytest.raises(distrib.checkpoint.files.format.UnsafeFileError, match="pickle"):
        _model().load_weights(str(tmp_path / "w.pt"))
    with pytest.raises(FileNotFoundError, match="not found"):
        _model().load_weights(str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError, match="latest_checkpoint"):
        _model().load_weights(distrib.train.latest_checkpoint(str(tmp_path / "empty")))


# ------------------------------------------------------------- ModelCheckpoint
def test_model_checkpoint_formats_paths_and_latest_checkpoint_finds_the_last(tmp_path):
    model = _model()
    ckpt = distrib.callbacks.ModelCheckpoint(str(tmp_path / "ckpts" / "ckpt_{epoch}"), save_weights_only=True)
    model.fit(X, Y, batch_size=16, epochs=3, verbose=0, callbacks=[ckpt])
    assert sorted(os.listdir(tmp_path / "ckpts")) == ["ckpt_1", "ckpt_2", "ckpt_3"]
    assert distrib.train.latest_checkpoint(str(tmp_path / "ckpts")) == str(tmp_path / "ckpts" / "ckpt_3")
    fresh = _model()
    fresh.load_weights(distrib.train.latest_checkpoint(str(tmp_path / "ckpts")))
    np.testing.assert_array_equal(fresh.predict(X, verbose=0), model.predict(X, verbose=0))


def test_model_checkpoint_save_best_only_with_threshold_and_full_model(tmp_path, capsys):
    model = _model(lr=0.05)
    losses = []

    class Record(distrib.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            losses.append(logs["val_loss"])

    path = str(tmp_path / "best-{epoch:02d}-{val_loss:.2f}")
    ckpt = distrib.callbacks.ModelCheckpoint(path, monitor="val_loss", save_best_only=True, verbose=1,
                                             initial_value_threshold=10.0)
    model.fit(X, Y, batch_size=16, epochs=4, verbose=0, validation_data=(X, Y), callbacks=[Record(), ckpt])
    best = [losses[i] for i in range(len(losses)) if losses[i] < min([10.0] + losses[:i])]
    expected = [os.path.basename(path.format(epoch=losses.index(v) + 1, val_loss=v)) for v in best]
    assert sorted(os.listdir(tmp_path)) == sorted(expected) and expected
    assert "improved from 10.00000" in capsys.readouterr().out
    loaded = distrib.models.load_model(ckpt.saved_paths[-1])
    assert loaded.evaluate(X, Y, verbose=0)[0] == pytest.approx(min(losses), rel=1e-5)


def test_model_checkpoint_threshold_that_is_never_beaten_saves_nothing(tmp_path):
    model = _model()
    ckpt = distrib.callbacks.ModelCheckpoint(str(tmp_path / "c_{epoch}"), monitor="loss", save_best_only=True,
                                             initial_value_threshold=0.0)
    model.fit(X, Y, batch_size=16, epochs=2, verbose=0, callbacks=[ckpt])
    assert os.listdir(tmp_path) == []


def test_model_checkpoint_every_n_batches_and_bad_arguments(tmp_path):
    model = _model()
    ckpt = distrib.callbacks.ModelCheckpoint(str(tmp_path / "e{epoch}-b{batch}"), save_weights_only=True,
                                             save_freq=3)
    model.fit(X, Y, batch_size=16, epochs=2, verbose=0, callbacks=[ckpt])  # 4 batches per epoch
    assert sorted(os.listdir(tmp_path)) == ["e1-b3", "e2-b2"]
    with pytest.raises(ValueError, match="save_freq"):
        distrib.callbacks.ModelCheckpoint("x", save_freq=0)
    bad = distrib.callbacks.ModelCheckpoint(str(tmp_path / "{val_acc}"))
    with pytest.raises(KeyError, match="val_acc.*available"):
        model.fit(X, Y, batch_size=16, epochs=1, verbose=0, callbacks=[bad])


# ------------------------------------------------------------- load_model without builder
def test_load_model_rebuilds_a_standard_sequential_without_builder(tmp_path):
    model = _model()
    model.fit(X, Y, batch_size=16, epochs=1, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.save(str(tmp_path / "m"))
    config = json.loads((tmp_path / "m" / "model.json").read_text())
    assert config["builder"] is None and config["architecture"]["class"] == "Sequential"
    loaded = distrib.models.load_model(str(tmp_path / "m"))
    assert repr(loaded.module) == repr(model.module)
    np.testing.assert_array_equal(loaded.predict(X, verbose=0), model.predict(X, verbose=0))


def test_load_model_refuses_a_foreign_class_in_the_architecture(tmp_path):
    _model().save(str(tmp_path / "m"))
    config_path = tmp_path / "m" / "model.json"
    config = json.loads(config_path.read_text())
    config["architecture"]["children"][0][1]["class"] = "os.system"
    data = json.dumps(config).encode()
    manifest = json.loads((tmp_path / "m" / "MANIFEST.json").read_text())
    manifest["files"]["model.json"] = {"sha256": distrib.checkpoint.files.fs.sha256(data), "size": len(data)}
    mbytes = json.dumps(manifest, indent=1, sort_keys=True).encode()
    config_path.write_bytes(data)
    (tmp_path / "m" / "MANIFEST.json").write_bytes(mbytes)
    (tmp_path / "m" / "COMPLETE").write_bytes(distrib.checkpoint.files.fs.sha256(mbytes).encode())
    with pytest.raises(SerializationError, match=r"'os.system' is not a standard torch.nn layer.*builder="):
        distrib.models.load_model(str(tmp_path / "m"))


def test_custom_module_defined_in_a_function_needs_custom_objects(tmp_path):
    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x) * 2

    model = distrib.Model(nn.Sequential(Custom()))
    with pytest.warns(UserWarning, match="defined inside a function"):
        model.save(str(tmp_path / "m"))
    with pytest.raises(SerializationError, match="Custom' was defined inside a function.*custom_objects"):
        distrib.models.load_model(str(tmp_path / "m"))
    loaded = distrib.models.load_model(str(tmp_path / "m"), custom_objects={"Custom": Custom})
    assert type(loaded.module[0]) is Custom


# ------------------------------------------------------------- export
def _cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 10))


def test_export_and_load_serve_any_batch_size_without_the_module(tmp_path):
    model = distrib.Model(_cnn())
    model.export(str(tmp_path / "e"), input_signature=[distrib.TensorSpec((None, 1, 8, 8), torch.float32)])
    assert sorted(os.listdir(tmp_path / "e")) == ["COMPLETE", "MANIFEST.json", "program.json", "signature.json",
                                                 "weights.safetensors"]
    loaded = distrib.saved_model.load(str(tmp_path / "e"))
    infer = loaded.signatures["serving_default"]
    x = torch.randn(7, 1, 8, 8)
    out = infer(x)
    assert list(out) == ["output_0"]
    torch.testing.assert_close(out["output_0"], model.module.eval()(x))
    torch.testing.assert_close(loaded(x[:1]), model.module(x[:1]))
    with pytest.raises(ValueError, match=r"input_0 has shape \(2, 1, 9, 8\).*expects shape \(None, 1, 8, 8\)"):
        infer(torch.randn(2, 1, 9, 8))


def test_export_from_an_example_batch_and_without_a_signature(tmp_path):
    module = _cnn()
    distrib.saved_model.save(module, str(tmp_path / "e"), example_inputs=np.zeros((3, 1, 8, 8), np.float32))
    spec = json.loads((tmp_path / "e" / "signature.json").read_text())["signatures"]["serving_default"]
    assert spec["inputs"] == [{"name": "input_0", "shape": [None, 1, 8, 8], "dtype": "float32"}]
    with pytest.raises(ExportError, match="input_signature"):
        distrib.saved_model.save(module, str(tmp_path / "f"))


def test_export_of_an_untraceable_model_is_one_clear_error(tmp_path):
    class DataDependent(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(ExportError, match="torch.export cannot trace DataDependent"):
        distrib.saved_model.save(DataDependent(), str(tmp_path / "e"),
                                 input_signature=[distrib.TensorSpec((None, 2), torch.float32)])
    assert not os.path.exists(tmp_path / "e")


def _rewrite(path, name, data):
    manifest = json.loads((path / "MANIFEST.json").read_text())
    manifest["files"][name] = {"sha256": distrib.checkpoint.files.fs.sha256(data), "size": len(data)}
    mbytes = json.dumps(manifest, indent=1, sort_keys=True).encode()
    (path / name).write_bytes(data)
    (path / "MANIFEST.json").write_bytes(mbytes)
    (path / "COMPLETE").write_bytes(distrib.checkpoint.files.fs.sha256(mbytes).encode())


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("torch.ops.aten.relu.default", "torch.os.system"), "refusing operator 'torch.os.system'"),
    (lambda t: t.replace('"expr_str": "', '"expr_str": "__import__(\'os\').system(\'true\') or ', 1),
     "refusing symbolic"),
])
def test_load_refuses_a_tampered_program(tmp_path, edit, message):
    distrib.saved_model.save(_cnn(), str(tmp_path / "e"),
                             input_signature=[distrib.TensorSpec((None, 1, 8, 8), torch.float32)])
    text = (tmp_path / "e" / "program.json").read_text()
    changed = edit(text)
    assert changed != text
    _rewrite(tmp_path / "e", "program.json", changed.encode())
    with pytest.raises(UnsafeProgramError, match=message):
        distrib.saved_model.load(str(tmp_path / "e"))


def test_load_detects_a_damaged_export(tmp_path):
    distrib.saved_model.save(_cnn(), str(tmp_path / "e"),
                             input_signature=[distrib.TensorSpec((None, 1, 8, 8), torch.float32)])
    data = bytearray((tmp_path / "e" / "weights.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / "e" / "weights.safetensors").write_bytes(bytes(data))
    with pytest.raises(storage.CorruptCheckpointError, match="weights.safetensors"):
        distrib.saved_model.load(str(tmp_path / "e"))


def test_learning_rate_under_a_schedule_reads_the_current_value_and_survives_save(tmp_path):
    schedule = distrib.optimizers.schedules.ExponentialDecay(0.1, decay_steps=4, decay_rate=0.5)
    torch.manual_seed(0)
    model = distrib.Model(_net())
    model.compile(optimizer=distrib.optimizers.SGD(learning_rate=schedule),
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert model.optimizer.learning_rate.numpy() == np.float32(0.1)
    seen = []

    class PrintLR(distrib.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append((model.optimizer.iterations, float(model.optimizer.learning_rate)))

    model.fit(X, Y, batch_size=16, epochs=2, verbose=0, callbacks=[PrintLR()])   # 4 steps per epoch
    assert seen == [(4, pytest.approx(0.05)), (8, pytest.approx(0.025))]
    assert model.torch_optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5 ** (7 / 4))  # the last step's
    with pytest.raises(TypeError, match="follows ExponentialDecay"):
        model.optimizer.learning_rate = 0.3
    model.save(str(tmp_path / "m"))
    loaded = distrib.models.load_model(str(tmp_path / "m"))
    assert loaded.optimizer.iterations == 8 and float(loaded.optimizer.learning_rate) == pytest.approx(0.025)
    piecewise = distrib.optimizers.schedules.PiecewiseConstantDecay([2], [1.0, 0.5])
    assert [piecewise(s) for s in (0, 2, 3)] == [1.0, 1.0, 0.5]
