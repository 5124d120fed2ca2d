"""Seed 000's custom training loop, ported: runs alone and on 2 workers, checkpoints, resumes."""
import os
import re
from pathlib import Path

from distrib.testing import run_python, run_script

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_ctl.py"


def _epochs(output):
    return [(int(e), float(a), float(l)) for e, a, l in
            re.findall(r"Epoch: (\d+), accuracy: ([\d.]+), train_loss: ([\d]+\.[\d]+)", output)]


def test_runs_alone(tmp_path):
    env = dict(os.environ, MNIST_EPOCHS="1", MNIST_STEPS="5", MNIST_CKPT_DIR=str(tmp_path / "ckpt"))
    env.pop("TF_CONFIG", None)
    proc = run_python([str(EXAMPLE)], env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [e for e, _, _ in _epochs(proc.stdout)] == [0]


def test_two_workers_train_checkpoint_and_resume(tmp_path):
    ckpt = tmp_path / "ckpt"
    env = {"MNIST_EPOCHS": "2", "MNIST_STEPS": "8", "MNIST_CKPT_DIR": str(ckpt)}
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
