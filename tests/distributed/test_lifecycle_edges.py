"""Item 17.6 with real processes under `distrib launch`: a SIGTERM that reaches a worker after
fit returned does not fail the job; the worker says why it exited with status 0."""
import pytest

from distrib.testing import run_script

pytestmark = pytest.mark.timeout(300)

SCRIPT = '''
import os, signal, sys
import numpy as np
import torch
import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore

torch.set_num_threads(1)
strategy = distrib.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = distrib.Model(torch.nn.Linear(3, 1))
    model.compile(optimizer="sgd", loss="mse")
x = np.ones((32, 3), "float32")
model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0, callbacks=[BackupAndRestore(sys.argv[1])])
print("fit returned", flush=True)
if strategy.replica_id == 1:
    os.kill(os.getpid(), signal.SIGTERM)  # e.g. the platform reclaims the node now
    raise RuntimeError("SIGTERM after fit did not end the task")
'''


def test_sigterm_after_fit_returned_is_a_clean_exit(tmp_path):
    script = tmp_path / "after_fit.py"
    script.write_text(SCRIPT)
    result = run_script(str(script), 2, args=[tmp_path / "backup"], timeout=180)
    assert result.returncode == 0, result.output[-3000:]
    assert result.restarts == 0 and not result.failures, result.output[-3000:]
    worker1 = result.outputs["worker 1"]
    assert "fit returned" in worker1
    assert "SIGTERM after training had finished" in worker1 and "exiting with status 0" in worker1
    assert "did not end the task" not in result.output


PLAIN_SCRIPT = '''
import os, signal
import distrib
strategy = distrib.MultiWorkerMirroredStrategy()
strategy.collective.barrier()
if strategy.replica_id == 1:
    os.kill(os.getpid(), signal.SIGTERM)  # nothing watches SIGTERM here: the task dies of it
'''


def test_launcher_says_an_outside_sigterm_was_not_its_own(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(PLAIN_SCRIPT)
    result = run_script(str(script), 2, timeout=120)
    assert result.returncode == 1, result.output[-3000:]
    assert result.failures and result.failures[0].startswith(
        "worker 1 was killed by SIGTERM from outside distrib launch (preempted?"), result.failures
