"""distrib.Model in one process: compile resolution, fit/evaluate/predict, History, callbacks."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import distrib
from distrib.data import Dataset


def _regression_data(n=25, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (x @ np.array([[1.0, -1.0], [2.0, 0.5], [-3.0, 1.0]], np.float32)).astype(np.float32)
    return x, y


def _classification_data(n=40, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (np.abs(x[:, 0] * 3).astype(np.int64) % classes)
    return x, y


# ------------------------------------------------------------------ compile
def test_compile_resolves_keras_names_with_keras_defaults():
    model = distrib.Model(torch.nn.Linear(4, 3))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    assert isinstance(model.torch_optimizer, distrib.optimizers.KerasAdam)   # Keras's rule, a torch optimizer
    assert model.torch_optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    assert model.metrics_names == ["loss", "accuracy"]
    assert type(model.metrics[1]).__name__ == "SparseCategoricalAccuracy"

    model.compile(optimizer="sgd", loss="binary_crossentropy", metrics=["accuracy", "mae"])
    assert isinstance(model.torch_optimizer, distrib.optimizers.KerasSGD)
    assert model.torch_optimizer.param_groups[0]["lr"] == pytest.approx(0.01)
    assert type(model.metrics[1]).__name__ == "BinaryAccuracy"
    assert model.metrics_names == ["loss", "accuracy", "mae"]

    model.compile(loss="mse")  # Keras's default optimizer
    assert isinstance(model.torch_optimizer, distrib.optimizers.KerasRMSprop)


def test_compile_passes_torch_optimizer_and_loss_objects_through():
    module = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(module.parameters(), lr=0.5)
    model = distrib.Model(module)
    model.compile(optimizer=opt, loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[distrib.metrics.SparseCategoricalAccuracy(name="acc")])
    assert model.torch_optimizer is opt and model.optimizer is opt
    assert model.metrics_names == ["loss", "acc"]


def test_unknown_names_are_rejected_with_the_name():
    model = distrib.Model(torch.nn.Linear(4, 3))
    with pytest.raises(ValueError, match="nope"):
        model.compile(optimizer="nope", loss="mse")
    with pytest.raises(ValueError, match="not_a_loss"):
        model.compile(optimizer="sgd", loss="not_a_loss")


# ---------------------------------------------------------------------- fit
def test_fit_numpy_equals_a_plain_torch_loop_and_history_is_the_weighted_mean():
    torch.manual_seed(0)
    x, y = _regression_data(n=25)
    module = torch.nn.Linear(3, 2)
    reference = copy.deepcopy(module)
    model = distrib.Model(module)
    model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.05), loss="mse")
    history = model.fit(x, y, batch_size=10, epochs=2, shuffle=False, verbose=0)

    opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    expected = []
    for _ in range(2):
        total = 0.0
        for lo in range(0, 25, 10):
            xb, yb = torch.from_numpy(x[lo:lo + 10]), torch.from_numpy(y[lo:lo + 10])
            loss = ((reference(xb) - yb) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            total += loss.item() * len(xb)
        expected.append(total / 25)
    for got, want in zip(module.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert history.history["loss"] == pytest.approx(expected, rel=1e-6)
    assert history.epoch == [0, 1]
    state = model.train_loop_state
    assert (state.epoch, state.step_in_epoch, state.global_step) == (1, 3, 6)


def test_fit_history_has_metrics_and_validation_per_epoch():
    torch.manual_seed(1)
    x, y = _classification_data()
    model = distrib.Model(torch.nn.Linear(4, 3))
    model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(x, y, batch_size=8, epochs=3, validation_data=(x[:16], y[:16]), verbose=0)
    assert sorted(history.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert all(len(v) == 3 for v in history.history.values())
    assert all(0.0 <= a <= 1.0 for a in history.history["accuracy"])
    val_loss, val_acc = model.evaluate(x[:16], y[:16], batch_size=8, verbose=0)
    assert history.history["val_loss"][-1] == pytest.approx(val_loss)
    assert history.history["val_accuracy"][-1] == pytest.approx(val_acc)


def test_validation_freq_selects_epochs():
    x, y = _regression_data()
    model = distrib.Model(torch.nn.Linear(3, 2))
    model.compile(optimizer="sgd", loss="mse")
    seen = []

    class Record(distrib.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append("val_loss" in logs)
    model.fit(x, y, epochs=4, validation_data=(x, y), validation_freq=2, callbacks=[Record()], verbose=0)
    assert seen == [False, True, False, True]


def test_fit_on_a_repeated_dataset_with_steps_per_epoch_like_the_seeds():
    torch.manual_seed(0)
    x, y = _classification_data(n=64)
    dataset = Dataset.from_tensor_slices((x, y)).shuffle(64).repeat().batch(16)
    model = distrib.Model(torch.nn.Linear(4, 3))
    model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.1),
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(dataset, epochs=3, steps_per_epoch=7, verbose=0)
    assert len(history.history["loss"]) == 3
    assert model.train_loop_state.global_step == 21
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_steps_per_epoch_beyond_a_finite_dataset_ends_epochs_with_the_pass_and_goes_on():
    """Keras 3: epochs of 3, 1 (the pass ends: a warning), 3 steps (``round_four.json`` compares the numbers)."""
    x, y = _regression_data(n=20)
    dataset = Dataset.from_tensor_slices((x, y)).batch(5)  # 4 batches in all
    model = distrib.Model(torch.nn.Linear(3, 2))
    model.compile(optimizer="sgd", loss="mse")
    with pytest.warns(UserWarning, match="ran out of data: an epoch of steps_per_epoch=3 reached the end"):
        history = model.fit(dataset, epochs=3, steps_per_epoch=3, verbose=0)
    assert model.train_loop_state.global_step == 3 + 1 + 3
    assert len(history.history["loss"]) == 3
    assert not model.stop_training


def test_steps_per_epoch_beyond_a_dataset_of_unknown_size_warns_and_stops():
    x, y = _regression_data(n=20)
    dataset = Dataset.from_tensor_slices((x, y)).filter(lambda a, b: True).batch(5)  # 4 batches, size unknown
    model = distrib.Model(torch.nn.Linear(3, 2))
    model.compile(optimizer="sgd", loss="mse")
    with pytest.warns(UserWarning, match="ran out of data"):
        history = model.fit(dataset, epochs=3, steps_per_epoch=3, verbose=0)
    assert model.train_loop_state.global_step == 4
    assert len(history.history["loss"]) == 2  # epoch 2 ran 1 step, then training stopped
    assert model.stop_training


def test_fit_on_torch_dataloader_and_map_style_dataset():
    x, y = _regression_data(n=30)
    tensors = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    for data, kwargs in ((torch.utils.data.DataLoader(tensors, batch_size=10), {}),
                         (tensors, {"batch_size": 10})):
        torch.manual_seed(0)
        model = distrib.Model(torch.nn.Linear(3, 2))
        model.compile(optimizer="sgd", loss="mse")
        history = model.fit(data, epochs=2, verbose=0, **kwargs)
        assert model.train_loop_state.global_step == 6
        assert history.history["loss"][1] < history.history["loss"][0]


def test_sample_weight_and_class_weight_weigh_examples():
    torch.manual_seed(0)
    x, y = _classification_data(n=24)
    init = torch.nn.Linear(4, 3)
    weights = {0: 2.0, 1: 0.0, 2: 1.0}
    results = []
    for kwargs in ({"class_weight": weights},
                   {"sample_weight": np.array([weights[int(c)] for c in y], np.float32)}):
        model = distrib.Model(copy.deepcopy(init))
        model.compile(optimizer="sgd", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, **kwargs)
        results.append(model.get_weights())
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-7)


def test_regularization_losses_are_added():
    class WithL2(torch.nn.Linear):
        @property
        def losses(self):
            return [0.5 * (self.weight ** 2).sum()]
    torch.manual_seed(0)
    x, y = _regression_data(n=10)
    module = WithL2(3, 2)
    reg = 0.5 * float((module.weight.detach() ** 2).sum())
    model = distrib.Model(module)
    model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.0), loss="mse")
    with torch.no_grad():
        plain = float(((module(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean())
    assert model.evaluate(x, y, batch_size=10, verbose=0) == pytest.approx(plain + reg, rel=1e-6)


def test_multi_output_losses_are_weighted_and_metrics_prefixed():
    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 1)

        def forward(self, x):
            return self.a(x), self.b(x)
    torch.manual_seed(0)
    x, y = _regression_data(n=12)
    y2 = y[:, :1] * 2
    model = distrib.Model(TwoHeads())
    model.compile(optimizer="sgd", loss=["mse", "mae"], loss_weights=[1.0, 0.5], metrics=[["mae"], []])
    logs = model.evaluate(x, (y, y2), batch_size=12, verbose=0, return_dict=True)
    with torch.no_grad():
        pa, pb = model(torch.from_numpy(x))
    want = float(((pa - torch.from_numpy(y)) ** 2).mean() + 0.5 * (pb - torch.from_numpy(y2)).abs().mean())
    assert logs["loss"] == pytest.approx(want, rel=1e-6)
    assert list(logs) == ["loss", "output_1_mae"]


# ------------------------------------------------------------ evaluate/predict
def test_evaluate_forms_and_predict_order():
    torch.manual_seed(0)
    x, y = _regression_data(n=23)
    model = distrib.Model(torch.nn.Linear(3, 2))
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    loss, mae = model.evaluate(x, y, batch_size=5, verbose=0)
    pred = model(torch.from_numpy(x)).detach()
    assert loss == pytest.approx(float(((pred - torch.from_numpy(y)) ** 2).mean()), rel=1e-6)
    assert mae == pytest.approx(float((pred - torch.from_numpy(y)).abs().mean()), rel=1e-6)
    assert model.evaluate(x, y, batch_size=5, verbose=0, return_dict=True) == {"loss": loss, "mae": mae}
    out = model.predict(x, batch_size=4, verbose=0)
    assert isinstance(out, np.ndarray) and out.shape == (23, 2)
    np.testing.assert_allclose(out, pred.numpy(), rtol=0, atol=1e-6)
    from_dataset = model.predict(Dataset.from_tensor_slices((x, y)).batch(6), verbose=0)
    np.testing.assert_allclose(from_dataset, out, rtol=0, atol=1e-6)


def test_predict_works_uncompiled():
    model = distrib.Model(torch.nn.Linear(3, 1))
    assert model.predict(np.zeros((5, 3), np.float32), verbose=0).shape == (5, 1)


# ---------------------------------------------------------------- callbacks
class _Recorder(distrib.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __getattribute__(self, name):
        if name.startswith("on_"):
            calls = object.__getattribute__(self, "calls")
            return lambda *args, **kwargs: calls.append((name,) + tuple(a for a in args if isinstance(a, int)))
        return object.__getattribute__(self, name)


def test_callbacks_are_called_in_keras_order():
    x, y = _regression_data(n=8)
    model = distrib.Model(torch.nn.Linear(3, 2))
    model.compile(optimizer="sgd", loss="mse")
    rec = _Recorder()
    model.fit(x, y, batch_size=4, epochs=2, validation_data=(x[:4], y[:4]), callbacks=[rec], verbose=0)
    epoch = lambda e: [("on_epoch_begin", e), ("on_train_batch_begin", 0), ("on_train_batch_end", 0),
                       ("on_train_batch_begin", 1), ("on_train_batch_end", 1), ("on_test_begin",),
                       ("on_test_batch_begin", 0), ("on_test_batch_end", 0), ("on_test_end",),
                       ("on_epoch_end", e)]
    assert rec.calls == [("on_train_begin",)] + epoch(0) + epoch(1) + [("on_train_end",)]
    assert rec.params["epochs"] == 2 and rec.params["steps"] == 2 and rec.model is model


def test_batch_logs_are_handed_out_every_log_every_steps_and_at_the_end():
    x, y = _regression_data(n=20)
    model = distrib.Model(torch.nn.Linear(3, 2))
    model.compile(optimizer="sgd", loss="mse")
    model.log_every = 3
    got = []

    class Logs(distrib.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            got.append(batch if logs is not None else None)
    model.fit(x, y, batch_size=2, epochs=1, callbacks=[Logs()], verbose=0)
    assert got == [None, None, 2, None, None, 5, None, None, 8, 9]


def test_stop_training_from_a_callback_ends_fit():
    x, y = _regression_data(n=20)
    model = distrib.Model(torch.nn.Linear(3, 2))
    model.compile(optimizer="sgd", loss="mse")

    class Stop(distrib.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 2:
                self.model.stop_training = True
    history = model.fit(x, y, batch_size=2, epochs=5, callbacks=[Stop()], verbose=0)
    assert model.train_loop_state.global_step == 3 and len(history.history["loss"]) == 1


def test_verbose_zero_prints_nothing_and_verbose_one_prints_a_bar(capsys):
    x, y = _regression_data(n=20)
    model = distrib.Model(torch.nn.Linear(3, 2))
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, epochs=2, verbose=0)
    model.evaluate(x, y, verbose=0)
    model.predict(x, verbose=0)
    assert capsys.readouterr().out == ""
    model.fit(x, y, epochs=2, verbose=1)
    out = capsys.readouterr().out
    assert "Epoch 2/2" in out and "loss:" in out


# ---------------------------------------------------------------- weights
def test_state_dict_and_weights_round_trip():
    x, y = _regression_data()
    model = distrib.Model(torch.nn.Linear(3, 2))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    model.fit(x, y, epochs=1, verbose=0)
    other = distrib.Model(torch.nn.Linear(3, 2))
    other.compile(optimizer="adam", loss="mse", metrics=["mae"])
    other.load_state_dict(model.state_dict())
    for a, b in zip(model.get_weights(), other.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert other.torch_optimizer.state_dict()["state"][0]["step"] == model.torch_optimizer.state_dict()["state"][0]["step"]
    fresh = distrib.Model(torch.nn.Linear(3, 2))
    fresh.set_weights(model.get_weights())
    np.testing.assert_array_equal(fresh.get_weights()[0], model.get_weights()[0])
    with pytest.raises(ValueError, match="shape"):
        fresh.set_weights([np.zeros((1, 1)), np.zeros(2)])


def test_two_replicas_in_one_process_take_the_single_replica_steps():
    """CentralStorageStrategy runs 2 replicas in this process: same weights, logs and predictions."""
    torch.manual_seed(0)
    x, y = _classification_data(n=36)
    init = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    results = []
    for strategy in (distrib.get_strategy(), distrib.experimental.CentralStorageStrategy(["cpu:0", "cpu:1"])):
        with strategy.scope():
            model = distrib.Model(copy.deepcopy(init))
            model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.1),
                          loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                          metrics=["accuracy"])
        history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, validation_data=(x, y), verbose=0)
        results.append((model.get_weights(), history.history, model.predict(x, batch_size=6, verbose=0)))
    (w1, h1, p1), (w2, h2, p2) = results
    for a, b in zip(w1, w2):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    for name in h1:
        assert h2[name] == pytest.approx(h1[name], rel=1e-6), name
    np.testing.assert_allclose(p1, p2, rtol=1e-6, atol=1e-6)
