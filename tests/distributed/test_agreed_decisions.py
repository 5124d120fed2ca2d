"""Decisions every worker shares are agreed, whatever the timing (issue 22, item 3).

The fast tests force the bad interleaving deterministically: the chief looks
at the directory, then a checkpoint appears, then the worker looks. The slow
test runs seed 000's program 20 times beside two CPU burners.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from distrib.testing import run_cluster, run_script

pytestmark = pytest.mark.timeout(300)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_ctl.py"


def late_worker_seed_flow(directory, published):
    """Seed 000's flow; worker 1 looks only after the chief listed and `published` became ckpt-1."""
    import time

    import torch

    import distrib
    from distrib.checkpoint import discovery, manager as manager_module

    strategy = distrib.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = torch.nn.Linear(2, 2)
    marker = os.path.join(os.path.dirname(directory), "chief-has-listed")
    if strategy.is_chief:
        listing = discovery.numbered_checkpoints

        def list_then_signal(*args, **kwargs):
            found = listing(*args, **kwargs)
            if not os.path.exists(marker):
                open(marker, "w").close()
            return found

        discovery.numbered_checkpoints = manager_module.numbered_checkpoints = list_then_signal
    else:
        deadline = time.monotonic() + 60
        while not os.path.exists(marker):
            if time.monotonic() > deadline:
                raise TimeoutError("the chief never listed the directory")
            time.sleep(0.01)  # poll
        os.rename(published, os.path.join(directory, "ckpt-1"))  # the chief's next save, early
    epoch = distrib.train.Variable(0)
    checkpoint = distrib.train.Checkpoint(model=model, epoch=epoch)
    manager = distrib.train.CheckpointManager(checkpoint, directory=directory, max_to_keep=1)
    first_view = manager.latest_checkpoint
    latest = distrib.train.latest_checkpoint(directory)
    if latest:
        checkpoint.restore(latest)
    restored_epoch = int(epoch)
    saves = 0
    while int(epoch) < 3:
        epoch.assign_add(1)
        manager.save()
        saves += 1
    return {"manager_view": first_view, "latest": latest, "restored_epoch": restored_epoch, "saves": saves,
            "final": manager.latest_checkpoint}


def test_a_checkpoint_published_between_the_chiefs_and_a_workers_look_is_agreed(tmp_path):
    import torch

    import distrib

    directory = tmp_path / "ckpt"
    directory.mkdir()
    published = tmp_path / "published"
    distrib.train.Checkpoint(model=torch.nn.Linear(2, 2), epoch=distrib.train.Variable(1)).write(str(published))
    chief, worker = run_cluster(late_worker_seed_flow, num_workers=2, args=(str(directory), str(published)),
                                timeout=150)
    assert chief == worker
    # the manager was created before ckpt-1 appeared (the chief's view); latest_checkpoint after it
    assert chief["manager_view"] is None
    assert chief["latest"] == str(directory / "ckpt-1") and chief["restored_epoch"] == 1
    assert chief["saves"] == 2 and chief["final"] == str(directory / "ckpt-2")


def chief_stops_alone(epochs):
    import numpy as np
    import torch

    import distrib
    from distrib.callbacks.callback import Callback

    strategy = distrib.MultiWorkerMirroredStrategy()
    with strategy.scope():
        torch.manual_seed(0)
        model = distrib.Model(torch.nn.Linear(3, 1))
        model.compile(optimizer="sgd", loss="mse")

    class ChiefDecides(Callback):
        """Sets stop_training on the chief only, mid-epoch 1 and never on the others."""

        def on_train_batch_end(self, batch, logs=None):
            if strategy.is_chief and model.train_loop_state.epoch == 1 and batch == 1:
                model.stop_training = True

    x = np.arange(48, dtype="float32").reshape(16, 3) / 48
    history = model.fit(x, x.sum(1, keepdims=True), batch_size=4, epochs=epochs, verbose=0,
                        callbacks=[ChiefDecides()])
    return {"epochs": len(history.history["loss"]), "step": model.train_loop_state.global_step,
            "stopped": model.stop_training}


def test_a_stop_set_on_one_worker_stops_every_worker_at_the_same_step():
    chief, worker = run_cluster(chief_stops_alone, num_workers=2, args=(4,), timeout=150)
    assert chief == worker
    assert chief["epochs"] == 2 and chief["stopped"] is True
    assert chief["step"] == 4 + 2  # 4 steps per epoch: all of epoch 0, then batches 0 and 1 of epoch 1


def _burners(n=2):
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_seed_000_flow_twenty_times_beside_two_cpu_burners(tmp_path):
    """The seed program unchanged, 2 workers, twice per directory (fresh start, then resume)."""
    burners = _burners()
    try:
        for run in range(20):
            ckpt = tmp_path / f"run{run}"
            env = {"MNIST_EPOCHS": "2", "MNIST_STEPS": "3", "MNIST_CKPT_DIR": str(ckpt)}
            result = run_script(str(EXAMPLE), num_workers=2, env=env, timeout=240)
            assert result.returncode == 0, f"run {run}: {result.output[-3000:]}"
            assert sorted(p.name for p in ckpt.iterdir()) == ["checkpoint", "ckpt-2"], f"run {run}"
            print(f"seed 000 flow: run {run + 1} of 20 passed", flush=True)
    finally:
        for b in burners:
            b.kill()
            b.wait()
