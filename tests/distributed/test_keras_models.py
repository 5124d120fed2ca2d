"""Keras 3 models (torch backend) with Dropout and BatchNormalization under MultiWorkerMirroredStrategy.

Keras keeps BatchNormalization's moving statistics and the dropout seed as
non-trainable variables (``requires_grad=False`` parameters): they must not
crash gradient sync, and replicas must stay identical. Keras's
BatchNormalization normalises with global-batch statistics in a
multi-replica scope (`distrib.strategies.layer_patches.keras_global_layers`; its
``synchronized`` flag is TensorFlow-only). Where dropout and batch statistics
are off, 2 workers equal one process; 2 and 3 workers with both on are
compared in `test_keras_global_layers_multi_worker.py`.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")  # before the first import of keras
pytest.importorskip("keras")

from distrib.testing import run_cluster  # noqa: E402

pytestmark = pytest.mark.timeout(240)

KERAS_ENV = {"KERAS_BACKEND": "torch"}
STEPS, GLOBAL_BATCH = 6, 8


def _keras():
    import keras

    if keras.backend.backend() != "torch":
        pytest.skip("Keras runs on another backend (KERAS_BACKEND must be torch)")
    # Keras names layers and variables by process-wide counters (sequential_8/dense_17): reset them, so
    # the reference built in this pytest process names its weights as the fresh tasks do, whatever
    # Keras models earlier tests in the process made (a shuffled order found it).
    keras.backend.clear_session(free_memory=False)  # its state only: gc.collect takes seconds here
    return keras


def _build(keras, dropout=0.5, batch_norm=True):
    keras.utils.set_random_seed(0)
    layers = [keras.Input((6,)), keras.layers.Dense(16, activation="relu")]
    if batch_norm:
        layers.append(keras.layers.BatchNormalization())
    layers += [keras.layers.Dropout(dropout), keras.layers.Dense(1)]
    return keras.Sequential(layers)


def _data():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(STEPS * GLOBAL_BATCH, 6)).astype(np.float32)
    y = (x @ rng.normal(size=(6, 1)) + 0.5).astype(np.float32)
    return x, y


def _weights(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def keras_custom_loop(training):
    import torch

    import distrib

    keras = _keras()
    strategy = distrib.MultiWorkerMirroredStrategy()
    n, rank = strategy.num_replicas_in_sync, strategy.replica_id
    with strategy.scope():
        model = _build(keras, batch_norm=training)
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05)
    initial = _weights(model)
    x, y = (torch.from_numpy(a) for a in _data())
    share = GLOBAL_BATCH // n

    def step(xb, yb):
        loss = distrib.nn.compute_average_loss(((model(xb, training=training) - yb) ** 2).sum(1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    losses = []
    for i in range(STEPS):
        rows = slice(i * GLOBAL_BATCH + rank * share, i * GLOBAL_BATCH + (rank + 1) * share)
        losses.append(float(strategy.reduce("SUM", strategy.run(step, (x[rows], y[rows])), axis=None)))
    return {"initial": initial, "final": _weights(model), "losses": losses, "replicas": n}


def keras_fit():
    import distrib

    keras = _keras()
    strategy = distrib.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = distrib.Model(_build(keras))
        model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.05), loss="mse")
    x, y = _data()
    initial = _weights(model.module)
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=3, shuffle=False, verbose=0)
    evaluation = model.evaluate(x, y, batch_size=GLOBAL_BATCH, verbose=0)
    return {"initial": initial, "final": _weights(model.module), "loss": history.history["loss"],
            "evaluate": evaluation, "replicas": strategy.num_replicas_in_sync}


def _moved(res, fragment):
    names = [k for k in res["final"] if fragment in k]
    assert names, f"no variable named like {fragment!r} in {sorted(res['final'])}"
    return all(not np.allclose(res["initial"][k], res["final"][k]) for k in names)


@pytest.mark.slow  # fit's twin (dropout and batch norm, replicas identical) stays in the default run
def test_keras_custom_loop_with_dropout_and_batch_norm_trains_and_replicas_stay_identical():
    workers = run_cluster(keras_custom_loop, num_workers=2, args=(True,), env=KERAS_ENV, timeout=200)
    assert [w["replicas"] for w in workers] == [2, 2]
    assert workers[0]["final"] == workers[1]["final"], "replicas drifted apart"
    assert _moved(workers[0], "dense/kernel") and _moved(workers[0], "moving_mean")
    assert _moved(workers[0], "moving_variance")
    assert all(np.isfinite(workers[0]["losses"]))


def test_keras_fit_with_dropout_and_batch_norm_trains_and_replicas_stay_identical():
    workers = run_cluster(keras_fit, num_workers=2, env=KERAS_ENV, timeout=200)
    assert [w["replicas"] for w in workers] == [2, 2]
    assert workers[0]["final"] == workers[1]["final"], "replicas drifted apart"
    assert workers[0]["evaluate"] == workers[1]["evaluate"]
    # fit ran Keras in training mode: the moving statistics moved
    assert _moved(workers[0], "moving_mean") and _moved(workers[0], "dense_1/kernel")
    assert workers[0]["loss"][-1] < workers[0]["loss"][0]


def test_keras_custom_loop_without_dropout_equals_one_process():
    workers = run_cluster(keras_custom_loop, num_workers=2, args=(False,), env=KERAS_ENV, timeout=200)
    reference = keras_custom_loop(False)
    assert reference["replicas"] == 1
    assert workers[0]["final"] == workers[1]["final"]
    for name, want in reference["final"].items():
        np.testing.assert_allclose(np.asarray(workers[0]["final"][name]), want.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    np.testing.assert_allclose(workers[0]["losses"], reference["losses"], rtol=1e-4)
    assert _moved(workers[0], "dense/kernel")


def keras_fit_save_load(directory):
    import distrib

    keras = _keras()
    _build(keras)                                     # another model first: this one's layer names shift
    strategy = distrib.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = distrib.Model(_build(keras, dropout=0.0))
        model.compile(optimizer="adam", loss="mse")
    x, y = _data()
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, shuffle=False, verbose=0)
    model.save(os.path.join(directory, "model"))
    model.save(os.path.join(directory, "model.keras"))
    model.save_weights(os.path.join(directory, "weights"))
    with strategy.scope():                            # every worker loads the chief's copy back
        loaded = distrib.models.load_model(os.path.join(directory, "model"))
    return {"predictions": model.predict(x, verbose=0).tolist(),
            "reloaded": loaded.predict(x, verbose=0).tolist()}


@pytest.mark.slow
def test_keras_model_saved_by_two_workers_loads_in_one_process(tmp_path):
    workers = run_cluster(keras_fit_save_load, num_workers=2, args=(str(tmp_path),), env=KERAS_ENV, timeout=200)
    import distrib

    keras = _keras()
    want = np.asarray(workers[0]["predictions"])
    assert workers[0]["predictions"] == workers[1]["predictions"]
    np.testing.assert_allclose(workers[1]["reloaded"], want, rtol=1e-6)
    x, _ = _data()
    for path in ("model", "model.keras"):
        loaded = distrib.models.load_model(str(tmp_path / path))
        np.testing.assert_allclose(loaded.predict(x, verbose=0), want, rtol=1e-5, atol=1e-6, err_msg=path)
    with distrib.MirroredStrategy().scope():
        fresh = distrib.Model(_build(keras, dropout=0.0))
    fresh.load_weights(str(tmp_path / "weights"))
    np.testing.assert_allclose(fresh.predict(x, verbose=0), want, rtol=1e-5, atol=1e-6)
