"""A Keras 3 model with BatchNormalization and a seeded Dropout trains to the same weights on 2 and on 3 workers.

Every worker reads the same global batches (DATA sharding) and takes its rows;
Keras's BatchNormalization then normalises with global-batch statistics and
the seeded Dropout keys its masks on the global row
(`distrib.strategies.layer_patches.keras_global_layers`), so the two jobs differ only in
float summation order. A control model trained beside it with a ``Lambda``
layer that centres the rows on their mean (over the replica's rows: distrib
cannot see into a Lambda) ends differently, which shows the comparison can
fail. (``GaussianDropout``, the control before, draws its noise by the global
row too since the noise layers were made global.)
"""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")  # before the first import of keras
pytest.importorskip("keras")

from distrib.testing import run_cluster  # noqa: E402

# In the slow run: tests/unit/test_global_keras_layers.py checks the same splits in one process
# (replicas on threads, a real all-reduce) in the default run.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

KERAS_ENV = {"KERAS_BACKEND": "torch"}
GLOBAL_BATCH, STEPS = 12, 5


def _build(keras, noise):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(16), keras.layers.BatchNormalization(),
                             keras.layers.Activation("relu"), noise, keras.layers.Dense(1)])


def custom_loop():
    import keras
    import torch

    import distrib

    strategy = distrib.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(GLOBAL_BATCH * STEPS, 6)).astype(np.float32)
    y = (x @ rng.normal(size=(6, 1))).astype(np.float32)
    with strategy.scope():
        model = _build(keras, keras.layers.Dropout(0.4, seed=3))
        control = _build(keras, keras.layers.Lambda(lambda t: t - keras.ops.mean(t, axis=0, keepdims=True)))
        optimizers = [torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.05)
                      for m in (model, control)]
        dataset = strategy.experimental_distribute_dataset(
            distrib.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))

    def step(xb, yb):
        losses = []
        for net, optimizer in zip((model, control), optimizers):
            loss = distrib.nn.compute_average_loss(((net(xb, training=True) - yb) ** 2).sum(1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        return losses[0]

    losses = [float(strategy.reduce("SUM", strategy.run(step, args=batch), axis=None)) for batch in dataset]
    weights = {m.name: {v.path: v.value.detach().tolist() for v in m.weights} for m in (model, control)}
    return {"replicas": strategy.num_replicas_in_sync, "losses": losses,
            "final": weights[model.name], "control": weights[control.name]}


def _differences(a, b):
    return [k for k in a if not np.allclose(np.asarray(a[k], dtype=np.float64), np.asarray(b[k], dtype=np.float64),
                                            rtol=1e-4, atol=1e-5)]


def test_keras_batch_norm_and_seeded_dropout_train_alike_on_two_and_three_workers():
    two = run_cluster(custom_loop, num_workers=2, env=KERAS_ENV, timeout=200)
    three = run_cluster(custom_loop, num_workers=3, env=KERAS_ENV, timeout=200)
    assert [w["replicas"] for w in two] == [2, 2] and [w["replicas"] for w in three] == [3, 3, 3]
    assert all(w["final"] == two[0]["final"] for w in two) and all(w["final"] == three[0]["final"] for w in three)
    moving = [k for k in two[0]["final"] if k.endswith("moving_mean")]
    assert moving and not np.allclose(two[0]["final"][moving[0]], 0.0)  # trained in training mode
    assert _differences(two[0]["final"], three[0]["final"]) == []
    np.testing.assert_allclose(two[0]["losses"], three[0]["losses"], rtol=1e-4)
    assert _differences(two[0]["control"], three[0]["control"]) != []  # the replica's own mean: share-dependent
