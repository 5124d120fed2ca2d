"""Fine-tuning shapes on 2 real workers equal one process on the same global batches.

A frozen layer, BatchNorm layers (one frozen, one trainable, both in training
mode), a layer unfrozen mid-run whose parameters join the optimizer as a new
param group: weights *and* running statistics must match one process, in a
custom loop and in `distrib.Model.fit`.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import distrib
from distrib.testing import run_cluster

pytestmark = pytest.mark.timeout(240)

STEPS, PER_REPLICA, UNFREEZE_AT = 6, 4, 3


def _build():
    torch.manual_seed(0)
    backbone = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU())
    head = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 1))
    for p in backbone.parameters():
        p.requires_grad_(False)
    return torch.nn.Sequential(backbone, head)


def _batches(global_batch):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(STEPS, global_batch, 6, generator=g) * 2 + 1
    y = torch.randn(STEPS, global_batch, 1, generator=g)
    return x, y


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def custom_loop():
    """Runs in each worker, and with one replica in the test process (the reference)."""
    strategy = distrib.MultiWorkerMirroredStrategy()
    n, rank = strategy.num_replicas_in_sync, strategy.replica_id
    with strategy.scope():
        model = _build()
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1, momentum=0.9)
    initial = _state(model)
    x, y = _batches(PER_REPLICA * 2)
    share = (PER_REPLICA * 2) // n
    mine = slice(rank * share, (rank + 1) * share)
    first_linear = model[0][0]

    def step(xb, yb):
        loss = distrib.nn.compute_average_loss(((model(xb) - yb) ** 2).sum(1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    losses = []
    for i in range(STEPS):
        if i == UNFREEZE_AT:  # fine-tuning: unfreeze the backbone's first layer, its own learning rate
            first_linear.requires_grad_(True)
            optimizer.add_param_group({"params": list(first_linear.parameters()), "lr": 0.05})
        losses.append(strategy.reduce("SUM", strategy.run(step, (x[i, mine], y[i, mine])), axis=None))
    return {"initial": initial, "final": _state(model), "losses": losses, "replicas": n,
            "frozen_bn_weight_grad": model[0][1].weight.grad}


def _assert_same_state(got, want):
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_allclose(np.asarray(got[name], dtype=np.float64), np.asarray(want[name], dtype=np.float64),
                                   rtol=1e-4, atol=1e-5, err_msg=name)


def test_custom_loop_fine_tuning_on_two_workers_equals_one_process():
    workers = run_cluster(custom_loop, num_workers=2, timeout=200)
    reference = custom_loop()
    assert reference["replicas"] == 1 and [w["replicas"] for w in workers] == [2, 2]
    assert workers[0]["final"] == workers[1]["final"], "replicas drifted apart"
    _assert_same_state(workers[0]["final"], {k: v.tolist() for k, v in reference["final"].items()})
    np.testing.assert_allclose(workers[0]["losses"], [float(v) for v in reference["losses"]], rtol=1e-4)
    assert workers[0]["frozen_bn_weight_grad"] is None
    # the unfrozen layer and the running statistics really moved
    for name in ("0.0.weight", "0.1.running_mean", "0.1.running_var", "1.1.running_mean", "1.0.weight"):
        assert not np.allclose(workers[0]["initial"][name], workers[0]["final"][name]), name


class _Unfreeze(distrib.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0:
            layer = self.model.module[0][0]
            layer.requires_grad_(True)
            self.model.torch_optimizer.add_param_group({"params": list(layer.parameters()), "lr": 0.05})


def model_fit():
    """`distrib.Model.fit`: epoch 1 trains the head, then the first backbone layer joins."""
    strategy = distrib.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = distrib.Model(_build())
        model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.1, momentum=0.9), loss="mse")
    x, y = _batches(8)
    x, y = x.reshape(-1, 6).numpy(), y.reshape(-1, 1).numpy()
    initial = _state(model.module)
    history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[_Unfreeze()])
    return {"initial": initial, "final": _state(model.module), "loss": history.history["loss"],
            "replicas": strategy.num_replicas_in_sync}


def test_model_fit_fine_tuning_on_two_workers_equals_one_process():
    workers = run_cluster(model_fit, num_workers=2, timeout=200)
    reference = model_fit()
    assert reference["replicas"] == 1 and [w["replicas"] for w in workers] == [2, 2]
    assert workers[0]["final"] == workers[1]["final"], "replicas drifted apart"
    _assert_same_state(workers[0]["final"], {k: v.tolist() for k, v in reference["final"].items()})
    np.testing.assert_allclose(workers[0]["loss"], reference["loss"], rtol=1e-4)
    for name in ("0.0.weight", "0.1.running_var", "1.1.running_mean"):
        assert not np.allclose(workers[0]["initial"][name], workers[0]["final"][name]), name


def local_batch_norm():
    """``sync_batch_norm=False``: local statistics (tf.distribute's default), running stats averaged."""
    strategy = distrib.MultiWorkerMirroredStrategy(
        communication_options=distrib.CommunicationOptions(sync_batch_norm=False))
    rank = strategy.replica_id
    with strategy.scope():
        bn = torch.nn.BatchNorm1d(2, momentum=1.0)  # running stats = the last batch's statistics
    x = torch.tensor([[0.0, 1.0], [2.0, 1.0]]) + 4.0 * rank  # local means (1, 1) and (5, 5)
    strategy.run(lambda: bn(x).sum().backward())
    torch.optim.SGD(bn.parameters(), lr=0.0).step()  # the step completes the sync
    return {"running_mean": bn.running_mean, "running_var": bn.running_var}


def test_local_batch_norm_averages_the_running_statistics():
    workers = run_cluster(local_batch_norm, num_workers=2, timeout=120)
    assert workers[0] == workers[1]
    # mean of the local means; mean of the local unbiased variances (2 and 0 per replica)
    assert workers[0]["running_mean"] == [3.0, 3.0]
    assert workers[0]["running_var"] == [2.0, 0.0]
