"""On a GPU host: two tasks sharing one GPU train as two CPU tasks do, and the ported tutorials run there.

Marked `cuda`: the default run hides the GPUs (tests/conftest.py), and
``DISTRIB_TEST_GPU=1 pytest -m cuda`` (part of ./scripts/test.sh where torch
sees a GPU) runs these with the GPU visible to every task.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from distrib.testing import run_cluster, run_python, run_script

pytestmark = [pytest.mark.cuda, pytest.mark.timeout(600),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS = 10


def train_where_placed(steps):
    """Two workers, each seeded differently: the initial broadcast and the all-reduce make them one model."""
    import distrib

    strategy = distrib.MultiWorkerMirroredStrategy()
    rank = strategy.replica_id
    torch.manual_seed(1000 + rank)
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(steps, 8, 6, generator=g), torch.randn(steps, 8, 1, generator=g)
    mine = slice(4 * rank, 4 * rank + 4)

    def step_fn(xb, yb):
        loss = distrib.nn.compute_average_loss(((model(xb) - yb) ** 2).sum(dim=1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    losses = []
    for s in range(steps):
        per_replica = strategy.run(step_fn, args=(x[s, mine].to(device), y[s, mine].to(device)))
        losses.append(strategy.reduce(distrib.ReduceOp.SUM, per_replica, axis=None).item())
    return {"device": str(device), "losses": losses, "final": [p.detach().cpu() for p in model.parameters()]}


def test_two_workers_sharing_one_gpu_train_as_two_cpu_workers_do():
    on_gpu = run_cluster(train_where_placed, num_workers=2, args=(STEPS,), timeout=300)
    on_cpu = run_cluster(train_where_placed, num_workers=2, args=(STEPS,), timeout=300,
                         env={"CUDA_VISIBLE_DEVICES": ""})
    assert [r["device"] for r in on_gpu] == ["cuda:0", "cuda:0"]
    assert [r["device"] for r in on_cpu] == ["cpu", "cpu"]
    assert on_gpu[0]["final"] == on_gpu[1]["final"]               # one model on both workers
    for a, b in zip(on_gpu[0]["final"], on_cpu[0]["final"]):      # the CPU run's model, to float tolerance
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=1e-4, atol=1e-5)
    assert on_gpu[0]["losses"] == pytest.approx(on_cpu[0]["losses"], rel=1e-4)


def test_keras_tutorial_trains_saves_exports_and_reloads_on_the_gpu(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), TUTORIAL_EXAMPLES="512", TUTORIAL_EPOCHS="2",
               TUTORIAL_DIR=str(tmp_path))
    env.pop("TF_CONFIG", None)
    proc = run_python([str(EXAMPLES / "tutorial_keras_distributed.py")], env=env, cwd=str(tmp_path), timeout=560)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "Number of devices: 1" in proc.stdout
    assert "checkpoints: ['ckpt_1', 'ckpt_2']" in proc.stdout
    assert "served predictions match: True" in proc.stdout


def test_input_tutorial_under_launch_with_two_workers_on_one_gpu():
    result = run_script(str(EXAMPLES / "tutorial_distributed_input.py"), num_workers=2, timeout=300)
    assert result.returncode == 0, result.output[-3000:]
    for w in range(2):
        assert "predict with index:" in result.outputs[f"worker {w}"]
