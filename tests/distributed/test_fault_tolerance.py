"""Fault injection with 2 real workers under `distrib launch --max-restarts`.

Each faulty run must finish with weights bit-identical to an uninterrupted
run: a worker SIGKILLed at a random step (either worker, several seeds), a
worker SIGKILLed in the middle of writing a backup (before its commit), and a
SIGTERM (preemption) to one worker, after which both save at the same step,
exit with the restart code and resume.
"""
import json
import os
import random

import pytest

from distrib.checkpoint.files.format import load_state
from distrib.checkpoint.preemption import RESTART_EXIT_CODE
from distrib.testing import run_script

pytestmark = pytest.mark.timeout(900)

EPOCHS, STEPS_PER_EPOCH, SAVE_FREQ = 3, 8, 5  # 24 global steps; backups at 5, 10, 15, 20

TRAIN_SCRIPT = '''
import json, os, signal, sys

import numpy as np
import torch

import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback
from distrib.checkpoint import save_state
from distrib.checkpoint.files import storage

backup_dir, out_dir, mode = sys.argv[1], sys.argv[2], sys.argv[3]
fault_rank, fault_step, save_freq = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
attempt = int(os.environ.get("DISTRIB_RESTART_COUNT", "0"))
torch.set_num_threads(1)

strategy = distrib.MultiWorkerMirroredStrategy()
rank = strategy.replica_id
armed = attempt == 0 and rank == fault_rank
with strategy.scope():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.2), torch.nn.ReLU(),
                                              torch.nn.Linear(16, 1)))
    model.compile(optimizer="adam", loss="mse")
if distrib.train.latest_checkpoint(backup_dir):
    torch.rand(7 + rank)  # a restarted process's RNGs differ; resuming from a backup must not depend on them


class Fault(Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if armed and mode == "sigterm" and model.train_loop_state.global_step + 1 == fault_step:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_train_batch_end(self, batch, logs=None):
        if armed and mode == "sigkill" and model.train_loop_state.global_step == fault_step:
            os.kill(os.getpid(), signal.SIGKILL)


if armed and mode == "sigkill-in-save":
    commit = storage.AtomicDirectory.commit

    def dying_commit(self):
        if model.train_loop_state.global_step == fault_step:
            os.kill(os.getpid(), signal.SIGKILL)  # files written, nothing committed yet
        return commit(self)

    storage.AtomicDirectory.commit = dying_commit

rs = np.random.RandomState(0)
x = rs.randn(2 * 8 * 8, 6).astype("float32")
y = (x @ rs.randn(6, 1)).astype("float32")
backup = BackupAndRestore(backup_dir, save_freq=save_freq)
model.fit(x, y, batch_size=16, epochs=3, shuffle=True, verbose=0, callbacks=[backup, Fault()])
with open(os.path.join(out_dir, f"attempt-{attempt}-rank-{rank}.json"), "w") as f:
    json.dump({"restored_from": backup.restored_from, "global_step": model.train_loop_state.global_step}, f)
save_state(model.module.state_dict(), os.path.join(out_dir, f"final-{rank}.safetensors"))
'''


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("fault") / "fault_train.py"
    path.write_text(TRAIN_SCRIPT.lstrip("\n"), encoding="utf-8")
    return str(path)


def _run(script, tmp_path, name, mode="none", fault_rank=-1, fault_step=-1, max_restarts=0):
    backup, out = tmp_path / f"{name}-backup", tmp_path / f"{name}-out"
    out.mkdir()
    result = run_script(script, num_workers=2, max_restarts=max_restarts, timeout=240,
                        args=[str(backup), str(out), mode, fault_rank, fault_step, SAVE_FREQ])
    assert result.returncode == 0, result.output[-4000:]
    finals = [load_state(str(out / f"final-{r}.safetensors")) for r in (0, 1)]
    assert _equal(finals[0], finals[1]), "the workers' final weights differ"
    assert not backup.exists(), "the backup must be deleted after a completed fit"
    resumed = [json.loads((out / f"attempt-{result.restarts}-rank-{r}.json").read_text()) for r in (0, 1)]
    assert resumed[0]["restored_from"] == resumed[1]["restored_from"], "the workers resumed from different backups"
    name = resumed[0]["restored_from"]
    return result, finals[0], (os.path.basename(name) if name else None)


def _equal(a, b):
    return a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


@pytest.fixture(scope="module")
def expected(script, tmp_path_factory):
    result, weights, restored = _run(script, tmp_path_factory.mktemp("reference"), "reference")
    assert result.restarts == 0 and restored is None
    return weights


def _sigkill_cases():
    cases = []
    for seed in (0, 1, 2):
        step = random.Random(seed).randint(1, EPOCHS * STEPS_PER_EPOCH - 1)
        # seed 0 runs by default; the other two (another worker, other steps) with -m slow
        marks = () if seed == 0 else (pytest.mark.slow,)
        cases.append(pytest.param(seed % 2, step, id=f"seed{seed}-worker{seed % 2}-step{step}", marks=marks))
    return cases


@pytest.mark.parametrize("rank,step", _sigkill_cases())
def test_sigkill_at_a_random_step_then_resume_is_bit_identical(script, expected, tmp_path, rank, step):
    result, weights, restored = _run(script, tmp_path, "kill", "sigkill", rank, step, max_restarts=2)
    assert result.restarts == 1 and result.preemption_restarts == 0
    last = step // SAVE_FREQ * SAVE_FREQ  # the fault callback runs after the backup of that step
    assert restored == (f"backup-{last}" if last else None)
    assert _equal(weights, expected), "resumed weights differ from the uninterrupted run"


@pytest.mark.parametrize("rank,step,allowed", [(0, 10, {"backup-5"}), (1, 15, {"backup-10", "backup-15"})],
                         ids=["chief-before-commit", "worker1-in-private-write"])
def test_sigkill_during_a_backup_write_never_loads_it_half_written(script, expected, tmp_path, rank, step, allowed):
    # worker 1 may die after the chief committed backup-15 (then that complete backup is used) or before
    result, weights, restored = _run(script, tmp_path, "kill-in-save", "sigkill-in-save", rank, step,
                                     max_restarts=2)
    assert result.restarts == 1
    assert restored in allowed
    assert _equal(weights, expected), "resumed weights differ from the uninterrupted run"


def test_sigterm_to_one_worker_saves_everywhere_and_resumes(script, expected, tmp_path):
    result, weights, restored = _run(script, tmp_path, "preempt", "sigterm", 1, 13, max_restarts=0)
    assert result.preemption_restarts == 1 and result.restarts == 1
    assert any(f"restart code {RESTART_EXIT_CODE}" in f for f in result.failures), result.failures
    assert restored == "backup-13"  # both workers saved at the step the signal arrived in
    assert _equal(weights, expected), "resumed weights differ from the uninterrupted run"
