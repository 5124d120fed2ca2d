"""Item 17.3: a killed worker's restart under torchrun (its agent keeps one store for every
attempt) resumes bit-identically from BackupAndRestore.

Worker 1 SIGKILLs itself once, at a step given by a flag file it removes first; torchrun
(--max-restarts 1) restarts both workers, which resume from the last backup. Their final
weights must equal those of an uninterrupted run of the same program on two workers (run
once per module, its tasks forked from the test harness's preloaded server: what a run
trains does not depend on which launcher started its tasks, and an uninterrupted torchrun
run would cost three more interpreters).
"""
import os
import subprocess
import sys

import pytest

from distrib.checkpoint.files.format import load_state
from distrib.process.ports import free_port
from distrib.testing import run_script

pytestmark = pytest.mark.timeout(900)

SCRIPT = '''
import json, os, signal, sys

import numpy as np
import torch

import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback
from distrib.checkpoint import save_state

backup_dir, out_dir, flag = sys.argv[1], sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
strategy = distrib.MultiWorkerMirroredStrategy(
    communication_options=distrib.CommunicationOptions(timeout_seconds=60))
rank = strategy.replica_id
with strategy.scope():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.2),
                                              torch.nn.ReLU(), torch.nn.Linear(16, 1)))
    model.compile(optimizer="adam", loss="mse")


class Fault(Callback):
    def on_train_batch_end(self, batch, logs=None):
        if rank == 1 and os.path.exists(flag):
            step = int(open(flag).read())
            if model.train_loop_state.global_step == step:
                os.remove(flag)
                os.kill(os.getpid(), signal.SIGKILL)


rs = np.random.RandomState(0)
x = rs.randn(2 * 8 * 8, 6).astype("float32")
y = (x @ rs.randn(6, 1)).astype("float32")
backup = BackupAndRestore(backup_dir, save_freq=5)
model.fit(x, y, batch_size=16, epochs=3, shuffle=True, verbose=0, callbacks=[backup, Fault()])
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT") or os.environ["DISTRIB_RESTART_COUNT"]
with open(os.path.join(out_dir, f"attempt-{attempt}-rank-{rank}.json"), "w") as f:
    json.dump({"restored_from": backup.restored_from}, f)
save_state(model.module.state_dict(), os.path.join(out_dir, f"final-{rank}.safetensors"))
'''


def _paths(tmp_path, name):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    backup, out, flag = tmp_path / f"{name}-backup", tmp_path / f"{name}-out", tmp_path / f"{name}-flag"
    out.mkdir()
    return script, backup, out, flag


def _results(out):
    finals = [load_state(str(out / f"final-{r}.safetensors")) for r in (0, 1)]
    return finals, sorted(p.name for p in out.glob("attempt-*"))


def _torchrun(tmp_path, name, kill_step=None):
    script, backup, out, flag = _paths(tmp_path, name)
    if kill_step is not None:
        flag.write_text(str(kill_step))
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [torchrun, "--nnodes", "1", "--nproc-per-node", "2", "--max-restarts", "1",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           str(script), str(backup), str(out), str(flag)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not flag.exists(), "the worker was never killed"
    return _results(out)


def _equal(a, b):
    return a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


@pytest.fixture(scope="module")
def expected(tmp_path_factory):
    """The final weights of an uninterrupted run on two workers (no flag: nothing is killed)."""
    script, backup, out, flag = _paths(tmp_path_factory.mktemp("reference"), "reference")
    result = run_script(str(script), num_workers=2, args=[backup, out, flag], timeout=300)
    assert result.returncode == 0, result.output[-4000:]
    finals, attempts = _results(out)
    assert attempts == ["attempt-0-rank-0.json", "attempt-0-rank-1.json"]
    assert _equal(finals[0], finals[1])
    return finals[0]


def _killed_once_and_resumed(expected, tmp_path, step):
    finals, attempts = _torchrun(tmp_path, "kill", kill_step=step)
    assert attempts == ["attempt-1-rank-0.json", "attempt-1-rank-1.json"], attempts
    assert _equal(finals[0], expected) and _equal(finals[1], expected), \
        "resumed weights differ from the uninterrupted run"


def test_torchrun_restart_resumes_bit_identically(expected, tmp_path):
    _killed_once_and_resumed(expected, tmp_path, 12)


@pytest.mark.slow
@pytest.mark.parametrize("step", [7, 12, 18])
def test_torchrun_restart_resumes_bit_identically_three_tries(expected, tmp_path, step):
    _killed_once_and_resumed(expected, tmp_path, step)
