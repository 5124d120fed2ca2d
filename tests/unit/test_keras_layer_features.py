"""Keras layer features a ported loop relies on, through Keras 3 layers on the torch backend (issue 39, item 6).

The decision (docs/porting.md, "Keras layer features"): ``kernel_regularizer``
and ``model.losses``, ``he_normal`` and ``BatchNormalization``'s defaults port
as Keras 3 layers inside distrib. These check that they reach distrib intact:
``fit`` logs the data loss plus ``sum(model.losses)``, a custom loop's
``scale_regularization_loss`` divides it by the replicas, ``he_normal`` is
truncated and BatchNormalization keeps Keras's momentum and epsilon.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("KERAS_BACKEND", "torch")  # before the first import of keras
keras = pytest.importorskip("keras")

import distrib  # noqa: E402

if keras.backend.backend() != "torch":  # pragma: no cover - another backend was chosen first
    pytest.skip("Keras runs on another backend (KERAS_BACKEND must be torch)", allow_module_level=True)

L2 = 0.01


def _model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([
        keras.Input((6,)),
        keras.layers.Dense(64, kernel_initializer="he_normal", kernel_regularizer=keras.regularizers.l2(L2)),
        keras.layers.BatchNormalization(),
        keras.layers.Dense(1, kernel_regularizer=keras.regularizers.l2(L2))])


def _penalty(model):
    return sum(L2 * float((w.value.detach() ** 2).sum()) for w in model.weights if w.path.endswith("kernel"))


def test_fit_logs_the_data_loss_plus_the_regularization_losses():
    x = np.random.default_rng(0).normal(size=(16, 6)).astype(np.float32)
    y = x[:, :1] * 2
    with distrib.get_strategy().scope():
        model = distrib.Model(_model())
        model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.0), loss="mse")   # weights stay put
    module = model.module
    assert len(module.losses) == 2
    history = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    with torch.no_grad():  # batch statistics, as in the training step; the learning rate 0 kept the weights
        data_loss = float(((module(torch.from_numpy(x), training=True) - torch.from_numpy(y)) ** 2).mean())
    assert history.history["loss"][0] == pytest.approx(data_loss + _penalty(module), rel=1e-5)


def test_scale_regularization_loss_divides_model_losses_by_the_replicas():
    model = _model()
    total = torch.stack(model.losses).sum()
    assert float(total) == pytest.approx(_penalty(model), rel=1e-6)
    strategy = distrib.get_strategy()
    assert float(strategy.run(lambda: distrib.nn.scale_regularization_loss(total))) == pytest.approx(float(total))


def test_he_normal_is_keras_truncated_normal_and_batch_norm_keeps_keras_defaults():
    model = _model()
    kernel = model.layers[0].kernel.value.detach()
    std = math.sqrt(2.0 / 6) / 0.87962566103423978
    assert float(kernel.abs().max()) <= 2 * std + 1e-6          # truncated at 2 standard deviations
    assert float(kernel.std()) == pytest.approx(std * 0.8796, rel=0.15)
    bn = model.layers[1]
    assert (bn.momentum, bn.epsilon) == (0.99, 1e-3)
