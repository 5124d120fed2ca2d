"""Elastic recovery of a job of more than three workers (issue 40).

In gloo's ring a survivor whose two neighbours are alive never sees the loss
itself: it waits in its collective for data that a recovering neighbour no
longer sends. Each survivor that enters recovery closes its process groups at
once, so that wait fails too and the whole ring recovers; before, such a
survivor waited out the collective timeout, the generation could not form in
time and the job restarted from its last backup. Five workers, worker 2 (the
chief too) SIGKILLed: the job must recover in place (one replacement, no
restart) and end with the uninterrupted run's weights, bit for bit.
"""
import pytest

from distrib.checkpoint.files.format import load_state
from distrib.launch import launch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WORKERS = 5

SCRIPT = '''
import os, signal, sys
import numpy as np
import torch
import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback
from distrib.checkpoint import save_state

out_dir, victim, kill_step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
strategy = distrib.MultiWorkerMirroredStrategy()
task = strategy.cluster_resolver.task_id
armed = task == victim and os.environ.get("DISTRIB_ELASTIC_JOIN") != "1"
with strategy.scope():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
    model.compile(optimizer="adam", loss="mse")


class Kill(Callback):
    def on_train_batch_end(self, batch, logs=None):
        if armed and model.train_loop_state.global_step == kill_step:
            os.kill(os.getpid(), signal.SIGKILL)


rs = np.random.RandomState(0)
x = rs.randn(40 * 6, 6).astype("float32")
y = (x @ rs.randn(6, 1)).astype("float32")
model.fit(x, y, batch_size=40, epochs=2, verbose=0,
          callbacks=[BackupAndRestore(os.path.join(out_dir, "backup"), save_freq=4), Kill()])
save_state(model.module.state_dict(), os.path.join(out_dir, f"final-{task}.safetensors"))
'''


def _run(script, out, victim=-1, kill_step=-1):
    out.mkdir()
    result = launch(str(script), [str(out), victim, kill_step], workers=WORKERS, elastic=True, max_restarts=1,
                    output="capture", timeout=400, grace_seconds=5)
    assert result.returncode == 0, result.output[-6000:]
    return result, [load_state(str(out / f"final-{t}.safetensors")) for t in range(WORKERS)]


@pytest.mark.parametrize("victim", [2, 0], ids=["worker", "chief"])
def test_a_job_of_five_workers_recovers_in_place_whoever_is_lost(tmp_path, victim):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    _, reference = _run(script, tmp_path / "reference")
    result, finals = _run(script, tmp_path / "faulty", victim, 5)
    assert (result.replacements, result.restarts) == (1, 0), result.output[-6000:]
    assert f"worker {victim} was killed by SIGKILL; starting a replacement for it alone" in result.output
    assert "Timed out" not in result.output, result.output[-6000:]  # no survivor waited out the timeout
    for task, weights in enumerate(finals):
        assert weights.keys() == reference[0].keys() and all(weights[k].equal(reference[0][k]) for k in weights), \
            f"worker {task}'s weights differ from the uninterrupted run"
