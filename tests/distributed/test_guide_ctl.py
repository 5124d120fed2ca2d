"""Seed 003's custom-training-loop and default-strategy snippets (examples/guide_ctl.py) under each strategy.

Every example of the guide's dataset is the same, so with the same initial
weights one replica on a global batch of 5 and two replicas on a global batch
of 10 must take the same steps and print the same losses: losses scaled by
the global batch, gradients summed across replicas.
"""
import os
from pathlib import Path

import pytest

from distrib.testing import run_python, run_script

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "guide_ctl.py"
SEED = "3"


def _losses(out):
    values = []
    for line in out.splitlines():
        try:
            values.append(float(line))
        except ValueError:
            pass
    return values


def _check(out, steps_per_pass):
    losses = _losses(out)
    assert len(losses) == steps_per_pass + 10, out[-2000:]      # the dataset once, then 10 steps; once per job
    assert losses[steps_per_pass - 1] < losses[0] and losses[-1] < losses[steps_per_pass - 1]
    assert out.count("default strategy reduce: 1.0") == 1
    assert out.count("Variable(name=None, value=1.0") == 1
    return losses


def _run(strategy):
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["OMP_NUM_THREADS"] = "1"  # as the harness's clusters have it: local replicas fork where replica 0 does
    proc = run_python([str(EXAMPLE), "--strategy", strategy, "--seed", SEED], env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def one_replica_losses():
    return _check(_run("default"), 200)


def test_default_strategy(one_replica_losses):
    assert len(one_replica_losses) == 210


def test_one_device_strategy(one_replica_losses):
    assert _check(_run("one_device"), 200) == pytest.approx(one_replica_losses, rel=1e-6)


@pytest.mark.parametrize("strategy", ["mirrored", "central_storage"])
def test_two_replicas_take_the_one_replica_steps(strategy, one_replica_losses):
    losses = _check(_run(strategy), 100)
    assert losses[:100] == pytest.approx(one_replica_losses[:100], rel=1e-5)


@pytest.mark.slow
def test_multi_worker_under_distrib_launch(one_replica_losses):
    result = run_script(str(EXAMPLE), num_workers=2, args=["--seed", SEED], timeout=240)
    assert result.returncode == 0, result.output[-3000:]
    losses = _check(result.outputs["worker 0"], 100)
    assert _losses(result.outputs["worker 1"]) == []
    assert losses[:100] == pytest.approx(one_replica_losses[:100], rel=1e-5)
