"""evaluate's and predict's bar knows the steps of a finite input (issue 39, item 8): ``32/32``, as TF
prints, not ``32/Unknown``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import distrib


class _Params(distrib.callbacks.Callback):
    def on_test_begin(self, logs=None):
        self.seen = self.params.get("steps")

    def on_predict_begin(self, logs=None):
        self.seen = self.params.get("steps")


@pytest.fixture
def model():
    model = distrib.Model(torch.nn.Linear(3, 1))
    model.compile(optimizer="sgd", loss="mse")
    return model


X = np.random.default_rng(1).normal(size=(64, 3)).astype("float32")
Y = X.sum(1, keepdims=True)


@pytest.mark.parametrize("call", [
    lambda m, cb: m.evaluate(distrib.data.Dataset.from_tensor_slices((X, Y)).batch(2), callbacks=[cb]),
    lambda m, cb: m.evaluate(X, Y, batch_size=2, callbacks=[cb]),
    lambda m, cb: m.predict(X, batch_size=2, callbacks=[cb]),
    lambda m, cb: m.predict(distrib.data.Dataset.from_tensor_slices(X).batch(2), callbacks=[cb]),
])
def test_a_finite_input_gives_the_bar_its_steps(model, call, capsys):
    cb = _Params()
    call(model, cb)
    out = capsys.readouterr().out
    assert cb.seen == 32
    assert "32/32" in out and "Unknown" not in out


def test_an_infinite_dataset_needs_steps_and_then_shows_them(model, capsys):
    cb = _Params()
    model.evaluate(distrib.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(2), steps=5, callbacks=[cb])
    assert cb.seen == 5 and "5/5" in capsys.readouterr().out
