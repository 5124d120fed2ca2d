"""A model with dropout and BatchNorm, and one with a TransformerEncoderLayer, train to the same weights on 2
and on 3 real workers.

Each worker reads the same global batches (DATA sharding) and takes its rows;
global-batch dropout keys every mask element on the example's row in the
global batch, and BatchNorm uses global-batch statistics, so how many workers
share a batch changes nothing but the float summation order. A control model
trained beside it with torch's own dropout kernels (called directly, past
``torch.nn.functional``, which distrib replaces in a multi-replica step) ends
differently on 2 and 3 workers, which shows the comparison can fail.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import distrib
from distrib.testing import run_cluster

pytestmark = pytest.mark.timeout(300)

GLOBAL_BATCH, STEPS = 12, 6


class PlainDropout(torch.nn.Dropout):
    """torch's own dropout kernel, called past ``torch.nn.functional`` (the control)."""

    def forward(self, x):
        return torch.ops.aten.dropout(x, self.p, self.training)


class PlainDropout1d(torch.nn.Dropout1d):
    """torch's own channel dropout kernel, called past ``torch.nn.functional`` (the control)."""

    def forward(self, x):
        return torch.ops.aten.feature_dropout(x, self.p, self.training)


def _model(dropout=torch.nn.Dropout, dropout1d=torch.nn.Dropout1d):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), dropout(0.3),
        torch.nn.Linear(16, 12), torch.nn.Unflatten(1, (3, 4)), dropout1d(0.5), torch.nn.Flatten(),
        torch.nn.Linear(12, 1))


def _data():
    rs = np.random.RandomState(0)
    x = rs.randn(GLOBAL_BATCH * STEPS, 6).astype("float32")
    return x, (x @ rs.randn(6, 1)).astype("float32")


def custom_loop():
    """Trains the model with distrib's dropout and, beside it, a control with torch's own dropout."""
    strategy = distrib.MultiWorkerMirroredStrategy()
    x, y = _data()
    with strategy.scope():
        model, control = _model(), _model(PlainDropout, PlainDropout1d)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        control_optimizer = torch.optim.SGD(control.parameters(), lr=0.05)
        dataset = strategy.experimental_distribute_dataset(
            distrib.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))
    control_rng = torch.get_rng_state()

    def train(net, opt, xb, yb):
        loss = distrib.nn.compute_average_loss(((net(xb) - yb) ** 2).sum(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    def step(inputs):
        nonlocal control_rng
        with torch.random.fork_rng():  # the control draws from its own stream, not the model's
            torch.set_rng_state(control_rng)
            train(control, control_optimizer, *inputs)
            control_rng = torch.get_rng_state()
        return train(model, optimizer, *inputs)

    losses = [float(strategy.reduce("SUM", strategy.run(step, args=(batch,)), axis=None)) for batch in dataset]
    return {"replicas": strategy.num_replicas_in_sync, "losses": losses,
            "final": {k: v.tolist() for k, v in model.state_dict().items()},
            "control": {k: v.tolist() for k, v in control.state_dict().items()}}


def model_fit():
    strategy = distrib.MultiWorkerMirroredStrategy()
    x, y = _data()
    with strategy.scope():
        model = distrib.Model(_model())
        model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.05), loss="mse")
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, shuffle=True, verbose=0)
    return {"replicas": strategy.num_replicas_in_sync, "losses": history.history["loss"],
            "final": {k: v.tolist() for k, v in model.module.state_dict().items()}}


def attention_loop():
    """A TransformerEncoderLayer (dropout in its attention, ``need_weights=False``) trained in a custom loop."""
    from distrib.strategies.layer_patches import global_dropout

    calls = []
    keyed = global_dropout._keyed_attention
    global_dropout._keyed_attention = lambda *a, **k: calls.append(1) or keyed(*a, **k)
    strategy = distrib.MultiWorkerMirroredStrategy()
    x, y = _data()
    with strategy.scope():
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.Unflatten(1, (2, 8)),
            torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.3, batch_first=True), torch.nn.Flatten(),
            torch.nn.Linear(16, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        dataset = strategy.experimental_distribute_dataset(
            distrib.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))

    def step(inputs):
        xb, yb = inputs
        loss = distrib.nn.compute_average_loss(((model(xb) - yb) ** 2).sum(1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    losses = [float(strategy.reduce("SUM", strategy.run(step, args=(batch,)), axis=None)) for batch in dataset]
    return {"replicas": strategy.num_replicas_in_sync, "losses": losses, "keyed attention calls": len(calls),
            "final": {k: v.tolist() for k, v in model.state_dict().items()}}


def _differences(a, b):
    return [k for k in a if not np.allclose(np.asarray(a[k], dtype=np.float64), np.asarray(b[k], dtype=np.float64),
                                            rtol=1e-4, atol=1e-5)]


@pytest.mark.parametrize("program", [custom_loop, pytest.param(attention_loop, marks=pytest.mark.slow),
                                     pytest.param(model_fit, marks=pytest.mark.slow)],
                         ids=["custom-loop", "attention", "fit"])
def test_dropout_and_batch_norm_train_alike_on_two_and_three_workers(program):
    two = run_cluster(program, num_workers=2, timeout=200)
    three = run_cluster(program, num_workers=3, timeout=200)
    assert [w["replicas"] for w in two] == [2, 2] and [w["replicas"] for w in three] == [3, 3, 3]
    assert all(w["final"] == two[0]["final"] for w in two) and all(w["final"] == three[0]["final"] for w in three)
    assert _differences(two[0]["final"], three[0]["final"]) == []
    np.testing.assert_allclose(two[0]["losses"], three[0]["losses"], rtol=1e-4)
    if program is attention_loop:  # the attention's dropout took the keyed path in every step
        assert [w["keyed attention calls"] for w in two + three] == [STEPS] * 5
    if program is custom_loop:  # the control, with torch's own dropout, shows the comparison can fail
        assert _differences(two[0]["control"], three[0]["control"]) != []
