"""Seed 000's custom training loop, ported: runs alone and on 2 workers, checkpoints, resumes.

Every task reads the offline digits from one ``mnist.npz`` (``DISTRIB_MNIST``) holding exactly
what `distrib.datasets.mnist.load_data()` builds, so the data is the example's own, built once
per module instead of once per task (each would import scikit-learn to build it).
"""
import os
import re
import subprocess
from pathlib import Path

import pytest

from distrib.testing import run_script, start_python

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_ctl.py"


def _epochs(output):
    return [(int(e), float(a), float(l)) for e, a, l in
            re.findall(r"Epoch: (\d+), accuracy: ([\d.]+), train_loss: ([\d]+\.[\d]+)", output)]


def test_runs_alone(tmp_path, mnist_npz):
    own = {"MNIST_EPOCHS": "1", "MNIST_STEPS": "5", "MNIST_CKPT_DIR": str(tmp_path / "ckpt")}
    env = dict(os.environ, DISTRIB_MNIST=mnist_npz, **own)
    env.pop("TF_CONFIG", None)
    # MNIST_* are read by the example only: a fork of the harness's preloaded server runs it.
    with open(tmp_path / "output.txt", "wb") as output:
        proc = start_python([str(EXAMPLE)], output=output, env=env, runtime=tuple(own))
        try:
            code = proc.wait(180)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    out = (tmp_path / "output.txt").read_text(encoding="utf-8", errors="replace")
    assert code == 0, out[-2000:]
    assert [e for e, _, _ in _epochs(out)] == [0]


def test_two_workers_train_checkpoint_and_resume(tmp_path, mnist_npz):
    ckpt = tmp_path / "ckpt"
    # DISTRIB_LAUNCH_FORK=1: each launch forks its 2 tasks from a server of its own (MNIST_* make a
    # start-up environment no shared server has), which does not evict the harness's shared ones.
    env = {"MNIST_EPOCHS": "2", "MNIST_STEPS": "8", "MNIST_CKPT_DIR": str(ckpt), "DISTRIB_MNIST": mnist_npz,
           "DISTRIB_LAUNCH_FORK": "1"}
    first = run_script(str(EXAMPLE), num_workers=2, env=env, timeout=240)
    assert first.returncode == 0, first.output[-3000:]
    epochs = _epochs(first.outputs["worker 0"])
    assert [e for e, _, _ in epochs] == [0, 1]
    assert _epochs(first.outputs["worker 1"]) == []          # only the chief prints
    assert epochs[1][2] < epochs[0][2]                         # the loss falls
    assert sorted(p.name for p in ckpt.iterdir()) == ["checkpoint", "ckpt-2"]   # chief's files only
    assert not list(tmp_path.rglob("*workertemp*"))

    env["MNIST_EPOCHS"] = "3"
    second = run_script(str(EXAMPLE), num_workers=2, env=env, timeout=240)
    assert second.returncode == 0, second.output[-3000:]
    assert [e for e, _, _ in _epochs(second.outputs["worker 0"])] == [2]   # resumed after epoch 1
    assert sorted(p.name for p in ckpt.iterdir()) == ["checkpoint", "ckpt-3"]  # max_to_keep=1
