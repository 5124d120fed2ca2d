"""CentralStorageStrategy with two replicas on one GPU (runs only where CUDA is present)."""
import pytest
import torch

import distrib

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _build():
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _train(strategy):
    torch.manual_seed(0)
    initial = [p.detach().clone() for p in _build().parameters()]  # same start on CPU and GPU
    with strategy.scope():
        model = _build()
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    with torch.no_grad():
        for p, v in zip(model.parameters(), initial):
            p.copy_(v)
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(10, 8, 5, generator=g), torch.randn(10, 8, 1, generator=g)
    for step in range(10):
        def step_fn(x, y):
            optimizer.zero_grad()
            loss = distrib.nn.compute_average_loss(((model(x) - y) ** 2).sum(1))
            loss.backward()
            optimizer.step()
        strategy.run(step_fn, (xs[step], ys[step]))
    return [p.detach().cpu() for p in model.parameters()]


def test_two_replicas_on_one_gpu_match_one_device():
    one = _train(distrib.OneDeviceStrategy("cuda:0"))
    central = distrib.experimental.CentralStorageStrategy(["cuda:0", "cuda:0"], parameter_device="cpu")
    assert central.num_replicas_in_sync == 2
    for a, b in zip(one, _train(central)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
