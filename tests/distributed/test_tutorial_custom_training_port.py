"""TF's "Custom training with tf.distribute.Strategy" tutorial, ported (examples/tutorial_custom_training.py).

The example runs unchanged as one process, as ``MirroredStrategy()`` on 2 CPU
replicas (``DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1``) and under ``distrib launch
--workers 2`` (MultiWorkerMirroredStrategy). What it prints is checked: the
loss falls, test accuracy beats chance, the restored checkpoint scores what
the epoch that saved it scored, every line appears once per job. And the
tutorial's promise — global-batch semantics — is checked differentially: with
the same seed (weights, shuffle) and the same global batch, 1 replica and 2
replicas print the same per-epoch losses to float tolerance.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from distrib.testing import run_script

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tutorial_custom_training.py"
GLOBAL_BATCH = 64
ARGS = ["--epochs", "2", "--train-examples", "1280", "--test-examples", "512", "--seed", "7"]

EPOCH_LINE = re.compile(
    r"^Epoch (\d+), Loss: (\S+), Accuracy: (\S+), Test Loss: (\S+), Test Accuracy: (\S+)$", re.M)
ALTERNATE_LINE = re.compile(r"^Epoch (\d+), Loss: (\S+), Accuracy: (\S+)$", re.M)
RESTORED_LINE = re.compile(r"^Accuracy after restoring the saved model without strategy: (\S+)$", re.M)


def _numbers(match):
    return tuple(int(g) if i == 0 else float(g) for i, g in enumerate(match))


def _parse(out):
    return {"epochs": [_numbers(m) for m in EPOCH_LINE.findall(out)],
            "alternate": [_numbers(m) for m in ALTERNATE_LINE.findall(out)],
            "restored": [float(v) for v in RESTORED_LINE.findall(out)],
            "devices": re.findall(r"^Number of devices: (\d+)$", out, re.M)}


def _run_local(tmp_path, devices):
    """The example from a plain ``python``, with ``devices`` CPU replicas and the same global batch."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "DISTRIB_LOCAL_DEVICES")}
    if devices > 1:
        env["DISTRIB_LOCAL_DEVICES"] = ",".join(f"cpu:{i}" for i in range(devices))
    cmd = [sys.executable, str(EXAMPLE), *ARGS, "--batch-size-per-replica", str(GLOBAL_BATCH // devices),
           "--checkpoint-dir", str(tmp_path / "ckpt")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _parse(proc.stdout), tmp_path / "ckpt"


@pytest.fixture(scope="module")
def one_replica(tmp_path_factory):
    return _run_local(tmp_path_factory.mktemp("one"), 1)


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory):
    return _run_local(tmp_path_factory.mktemp("two"), 2)


def _check_tutorial_output(parsed, replicas):
    assert parsed["devices"] == [str(replicas)]
    epochs = parsed["epochs"]
    assert [e[0] for e in epochs] == [1, 2], epochs                  # once per job, not per replica
    (_, loss1, acc1, test_loss1, test_acc1), (_, loss2, acc2, test_loss2, test_acc2) = epochs
    assert loss2 < loss1 and test_loss2 < test_loss1                   # it learns
    assert test_acc2 > 20.0                                             # 10 classes: chance is 10%
    # Saved after epoch 1 only (`epoch % 2 == 0`): the restored model scores epoch 1's accuracy.
    assert parsed["restored"] == [pytest.approx(test_acc1, abs=1e-4)]
    assert test_acc2 != pytest.approx(test_acc1, abs=1e-4)             # ... not the live model's
    alternate = parsed["alternate"]
    assert [a[0] for a in alternate] == [1, 2, 1, 2], alternate        # iterators, then a whole-epoch function
    assert alternate[-1][1] < loss2                                     # training went on from the model


def test_one_process(one_replica):
    parsed, ckpt = one_replica
    _check_tutorial_output(parsed, 1)
    assert sorted(p.name for p in ckpt.iterdir()) == ["ckpt-1"]


def test_mirrored_two_cpu_replicas(two_replicas):
    parsed, ckpt = two_replicas
    _check_tutorial_output(parsed, 2)
    assert sorted(p.name for p in ckpt.iterdir()) == ["ckpt-1"]


def _assert_same_losses(a, b):
    """Per-epoch losses of two runs with the same seed and global batch agree (global-batch semantics)."""
    for ea, eb in zip(a["epochs"], b["epochs"], strict=True):
        assert eb[1] == pytest.approx(ea[1], rel=1e-3)                  # train loss
        assert eb[3] == pytest.approx(ea[3], rel=1e-3)                  # test loss
        assert eb[4] == pytest.approx(ea[4], abs=0.5)                   # test accuracy, within 2 of 512 examples
    for ea, eb in zip(a["alternate"], b["alternate"], strict=True):
        assert eb[1] == pytest.approx(ea[1], rel=1e-2)                  # later epochs drift a little further


def test_one_and_two_replicas_take_the_same_steps(one_replica, two_replicas):
    _assert_same_losses(one_replica[0], two_replicas[0])


@pytest.mark.slow
def test_multi_worker_under_distrib_launch(one_replica, tmp_path):
    ckpt = tmp_path / "ckpt"
    result = run_script(str(EXAMPLE), num_workers=2, timeout=300,
                        args=[*ARGS, "--batch-size-per-replica", GLOBAL_BATCH // 2, "--checkpoint-dir", ckpt])
    assert result.returncode == 0, result.output[-3000:]
    parsed = _parse(result.outputs["worker 0"])
    _check_tutorial_output(parsed, 2)
    assert _parse(result.outputs["worker 1"]) == {"epochs": [], "alternate": [], "restored": [], "devices": []}
    assert sorted(p.name for p in ckpt.iterdir()) == ["ckpt-1"]        # the chief's files only
    _assert_same_losses(one_replica[0], parsed)
