"""Mistakes that used to train wrongly in silence now stop with a message (2 real workers)."""
from __future__ import annotations

import pytest
import torch

from distrib.testing import run_cluster

pytestmark = pytest.mark.timeout(180)


def mistakes():
    import distrib

    strategy = distrib.MultiWorkerMirroredStrategy()
    rank = strategy.replica_id
    out = {}

    # (a) a module created outside the scope, stepped inside strategy.run
    torch.manual_seed(rank)  # different weights per worker: they would never agree
    outside = torch.nn.Linear(3, 1)
    with strategy.scope():
        optimizer = torch.optim.SGD(outside.parameters(), lr=0.1)
    x = torch.full((2, 3), float(rank + 1))

    def step():
        outside(x).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    try:
        strategy.run(step)
        out["outside"] = None
    except distrib.errors.DistribError as e:
        out["outside"] = str(e)
    out["untouched"] = outside.weight.detach().clone()
    # the fix the message names: adopt the module; it then trains in sync
    optimizer.zero_grad()
    strategy.track_module(outside)
    strategy.run(step)
    out["adopted"] = outside.weight.detach()

    # (b) a loss object with its default reduction (local mean) inside strategy.run
    with strategy.scope():
        model = torch.nn.Linear(3, 1)
    mse = distrib.losses.MeanSquaredError()
    try:
        strategy.run(lambda: mse(torch.zeros(2, 1), model(x)))
        out["auto_loss"] = None
    except ValueError as e:
        out["auto_loss"] = str(e)
    per_example = distrib.losses.MeanSquaredError(reduction=distrib.losses.Reduction.NONE)
    out["none_loss"] = strategy.reduce(
        "SUM", strategy.run(lambda: distrib.nn.compute_average_loss(per_example(torch.zeros(2, 1), x[:, :1]))),
        axis=None)

    # (c) compute_average_loss in cross-replica context, and TF's numbers in the replica context
    try:
        with strategy.scope():
            distrib.nn.compute_average_loss(torch.ones(4))
        out["cross_replica"] = None
    except RuntimeError as e:
        out["cross_replica"] = str(e)
    out["rank2"] = strategy.run(lambda: distrib.nn.compute_average_loss(torch.arange(12.0).reshape(4, 3)))
    return out


@pytest.fixture(scope="module")
def results():
    return run_cluster(mistakes, num_workers=2, timeout=150)


def test_a_module_created_outside_the_scope_is_refused_at_its_first_step(results):
    for rank, res in enumerate(results):
        msg = res["outside"]
        assert msg is not None, "the unsynced step went through"
        assert "Linear(in_features=3, out_features=1, bias=True).weight" in msg
        assert "MultiWorkerMirroredStrategy" in msg and "drift apart" in msg
        assert "strategy.track_module(module)" in msg and "strategy.scope()" in msg
    # refused before stepping: each worker still holds its own initial weights
    assert results[0]["untouched"] != results[1]["untouched"]
    # adopted: weights broadcast from the chief, then stepped with the summed gradient
    assert results[0]["adopted"] == results[1]["adopted"]


def test_a_loss_with_the_default_reduction_is_refused_inside_run(results):
    for res in results:
        msg = res["auto_loss"]
        assert msg is not None
        assert "loss 'mean_squared_error' with reduction='auto'" in msg
        assert "`distrib.losses.Reduction.SUM` or `distrib.losses.Reduction.NONE`" in msg
        assert "distrib.nn.compute_average_loss" in msg and "Model.compile()" in msg
        # the per-example form works: mean over the global batch of 4 examples (x = 1, 1, 2, 2)
        assert res["none_loss"] == pytest.approx((1 + 1 + 4 + 4) / 4)


def test_compute_average_loss_follows_tf_on_two_workers(results):
    for res in results:
        assert "You are calling `compute_average_loss` in cross replica context" in res["cross_replica"]
        assert "strategy.run()" in res["cross_replica"]
        assert res["rank2"] == pytest.approx(66 / 8)  # all 12 elements summed, global batch 4 * 2
