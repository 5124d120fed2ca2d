"""MultiWorkerMirroredStrategy across real worker processes on 127.0.0.1."""

import pytest
import torch

from distrib.testing import run_cluster

STEPS = 20
PER_REPLICA = 4


def _data(num_workers):
    g = torch.Generator().manual_seed(1234)
    global_batch = PER_REPLICA * num_workers
    x = torch.randn(STEPS, global_batch, 6, generator=g)
    y = torch.randn(STEPS, global_batch, 1, generator=g)
    return x, y


def _build():
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _make_optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.Adam(params, lr=0.01)


def train_on_workers(optimizer_name):
    """Each worker seeds differently; weights must still start and end identical."""
    import distrib

    strategy = distrib.MultiWorkerMirroredStrategy()
    rank = strategy.replica_id
    torch.manual_seed(1000 + rank)
    with strategy.scope():
        model = _build()
        optimizer = _make_optimizer(optimizer_name, model.parameters())
    initial = [p.detach().clone() for p in model.parameters()]
    x, y = _data(strategy.num_replicas_in_sync)
    mine = slice(rank * PER_REPLICA, (rank + 1) * PER_REPLICA)

    def step_fn(xb, yb):
        per_example = ((model(xb) - yb) ** 2).sum(dim=1)
        loss = distrib.nn.compute_average_loss(per_example)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    losses = []
    for step in range(STEPS):
        per_replica = strategy.run(step_fn, args=(x[step, mine], y[step, mine]))
        losses.append(strategy.reduce(distrib.ReduceOp.SUM, per_replica, axis=None))
    return {"initial": initial, "final": [p.detach() for p in model.parameters()],
            "losses": torch.stack(losses), "replicas": strategy.num_replicas_in_sync}


def _reference(initial, optimizer_name, num_workers):
    model = _build()
    with torch.no_grad():
        for p, v in zip(model.parameters(), initial):
            p.copy_(torch.tensor(v))
    optimizer = _make_optimizer(optimizer_name, model.parameters())
    x, y = _data(num_workers)
    losses = []
    for step in range(STEPS):
        loss = ((model(x[step]) - y[step]) ** 2).sum(dim=1).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return [p.detach() for p in model.parameters()], losses


@pytest.mark.parametrize("optimizer_name", ["sgd", pytest.param("adam", marks=pytest.mark.slow)])
def test_two_workers_match_one_process_on_global_batches(optimizer_name):
    results = run_cluster(train_on_workers, num_workers=2, args=(optimizer_name,), timeout=120)
    assert [r["replicas"] for r in results] == [2, 2]
    assert results[0]["initial"] == results[1]["initial"], "workers started from different weights"
    assert results[0]["final"] == results[1]["final"], "workers ended with different weights"
    expected, expected_losses = _reference(results[0]["initial"], optimizer_name, 2)
    for got, want in zip(results[0]["final"], expected):
        torch.testing.assert_close(torch.tensor(got), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.tensor(results[0]["losses"]), torch.tensor(expected_losses),
                               rtol=1e-5, atol=1e-6)
    # the training moved the weights: the comparison above is not between two untouched models
    assert not torch.allclose(torch.tensor(results[0]["initial"][0]), expected[0])


def reductions():
    import distrib

    strategy = distrib.MultiWorkerMirroredStrategy()
    r = strategy.replica_id
    value = torch.arange(r + 1, dtype=torch.float32) + 10 * r  # uneven lengths: r + 1 elements
    scalar = torch.tensor(float(r + 1))
    return {
        "sum_scalar": strategy.reduce(distrib.ReduceOp.SUM, scalar, axis=None),
        "mean_scalar": strategy.reduce(distrib.ReduceOp.MEAN, scalar, axis=None),
        "sum_axis": strategy.reduce("SUM", value, axis=0),
        "mean_axis": strategy.reduce(distrib.ReduceOp.MEAN, value, axis=0),
        "gather": strategy.gather(value, axis=0),
        "gather_2d": strategy.gather(torch.full((2, r + 1), float(r)), axis=1),
        "nested": strategy.reduce(distrib.ReduceOp.SUM, {"a": scalar, "b": (scalar * 2,)}, axis=None),
        "local": len(strategy.experimental_local_results(scalar)),
    }


@pytest.mark.parametrize("num_workers", [2, 3])
def test_reduce_and_gather(num_workers):
    results = run_cluster(reductions, num_workers=num_workers, timeout=120)
    values = [torch.arange(r + 1, dtype=torch.float32) + 10 * r for r in range(num_workers)]
    everything = torch.cat(values)
    for res in results:
        assert res["sum_scalar"] == pytest.approx(sum(r + 1 for r in range(num_workers)))
        assert res["mean_scalar"] == pytest.approx(sum(r + 1 for r in range(num_workers)) / num_workers)
        assert res["sum_axis"] == pytest.approx(float(everything.sum()))
        assert res["mean_axis"] == pytest.approx(float(everything.mean()))
        assert res["gather"] == everything.tolist()
        assert torch.tensor(res["gather_2d"]).shape == (2, sum(r + 1 for r in range(num_workers)))
        total = sum(r + 1 for r in range(num_workers))
        assert res["nested"] == {"a": pytest.approx(total), "b": [pytest.approx(2 * total)]}
        assert res["local"] == 1


def unused_and_accumulated_gradients():
    """A parameter no replica uses keeps grad None; accumulation before a step stays exact."""
    import distrib

    strategy = distrib.MultiWorkerMirroredStrategy()
    rank = strategy.replica_id
    with strategy.scope():
        used = torch.nn.Linear(3, 1)
        unused = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(list(used.parameters()) + list(unused.parameters()), lr=1.0)
    before = [p.detach().clone() for p in used.parameters()]
    x = torch.full((2, 3), float(rank + 1))
    for _ in range(2):  # two backward passes accumulate before one step
        used(x).sum().backward()
    local_grad = used.weight.grad.clone()
    optimizer.step()
    return {"unused_grad_is_none": unused.weight.grad is None,
            "used_grad": used.weight.grad, "local_grad": local_grad,
            "moved": [(b - p.detach()) for b, p in zip(before, used.parameters())]}


def test_unused_parameters_and_gradient_accumulation():
    results = run_cluster(unused_and_accumulated_gradients, num_workers=2, timeout=120)
    total = torch.tensor(results[0]["local_grad"]) + torch.tensor(results[1]["local_grad"])
    for res in results:
        assert res["unused_grad_is_none"]
        torch.testing.assert_close(torch.tensor(res["used_grad"]), total)
        torch.testing.assert_close(torch.tensor(res["moved"][0]), total)


def accumulation_with_zero_grad_in_place():
    """zero_grad(set_to_none=False) keeps gradients in place across steps; sums stay exact."""
    import distrib

    strategy = distrib.MultiWorkerMirroredStrategy()
    rank = strategy.replica_id
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    local_grads, summed = [], []
    for step in range(3):
        optimizer.zero_grad(set_to_none=False)
        for micro in range(2):
            x = torch.full((2, 3), float(rank + step + micro + 1))
            model(x).sum().backward()
        local_grads.append(model.weight.grad.clone())
        optimizer.step()
        summed.append(model.weight.grad.clone())
    return {"local": local_grads, "summed": summed}


def test_in_place_zero_grad_and_accumulation_across_steps():
    results = run_cluster(accumulation_with_zero_grad_in_place, num_workers=2, timeout=120)
    for step in range(3):
        total = torch.tensor(results[0]["local"][step]) + torch.tensor(results[1]["local"][step])
        for res in results:
            torch.testing.assert_close(torch.tensor(res["summed"][step]), total)
