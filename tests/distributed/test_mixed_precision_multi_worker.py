"""Mixed precision across 2 real worker processes (MultiWorkerMirroredStrategy on CPU).

Shown: an inf in one replica's loss makes *every* replica skip that step and
halve its scale (the overflow check runs on the summed gradients), and fit
under mixed_bfloat16 trains with identical float32 weights on both workers.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import distrib
from distrib.testing import run_cluster

pytestmark = pytest.mark.timeout(240)

STEPS, POISONED_STEP = 6, 2


def loss_scaling_with_one_poisoned_replica():
    """Each worker: a custom loop whose replica 1 gets an inf loss at step POISONED_STEP."""
    strategy = distrib.MultiWorkerMirroredStrategy()
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Linear(4, 2)
        opt = distrib.mixed_precision.LossScaleOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), initial_scale=16.0, dynamic_growth_steps=2)
    rank = strategy.cluster_resolver.task_id
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(rank))
    record = []
    for step in range(STEPS):
        def step_fn():
            loss = distrib.nn.compute_average_loss(model(x).pow(2).sum(dim=1), global_batch_size=16)
            if step == POISONED_STEP and rank == 1:
                loss = loss * float("inf")
            opt.scale(loss).backward()
            stepped = opt.step()
            opt.zero_grad()
            return stepped
        stepped = strategy.run(step_fn)
        record.append([bool(stepped), opt.loss_scale, [p.detach().tolist() for p in model.parameters()]])
    return record


def test_an_inf_on_one_replica_skips_the_step_on_every_replica():
    w0, w1 = run_cluster(loss_scaling_with_one_poisoned_replica, num_workers=2)
    assert w0 == w1  # same decisions, same scales, same weights on both workers
    stepped = [r[0] for r in w0]
    assert stepped == [step != POISONED_STEP for step in range(STEPS)]
    assert w0[POISONED_STEP][2] == w0[POISONED_STEP - 1][2]   # the skipped step changed nothing
    scales = [r[1] for r in w0]
    assert scales[POISONED_STEP] == scales[POISONED_STEP - 1] / 2
    assert scales[0] == 16.0 and scales[1] == 32.0           # doubled after 2 good steps


def fit_mixed_bfloat16():
    distrib.mixed_precision.set_global_policy("mixed_bfloat16")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    strategy = distrib.MultiWorkerMirroredStrategy()
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)))
        model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.2),
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(x, y, batch_size=16, epochs=4, verbose=0)
    return {"loss": history.history["loss"],
            "dtypes": sorted({str(p.dtype) for p in model.module.parameters()}),
            "weights": [w.tolist() for w in model.get_weights()]}


def test_fit_under_mixed_bfloat16_trains_on_two_workers():
    r0, r1 = run_cluster(fit_mixed_bfloat16, num_workers=2)
    assert r0 == r1
    assert r0["dtypes"] == ["torch.float32"]
    assert r0["loss"][-1] < r0["loss"][0]
