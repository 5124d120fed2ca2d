"""Saving without stopping training (issue 41, item 2): background writes, one in flight at a time.

``CheckpointOptions(enable_async=True)`` copies the state at the call and
writes the copy on a thread while training goes on. What must hold: the file
holds the values of the step it was taken at; the previous checkpoint stays
the newest (and is not deleted) until the new one is published; a failed
write is raised by the next call that waits; a process killed mid-write
leaves the previous checkpoint; and a resumed ``fit`` is still bit-identical.
"""
import errno
import os
import select
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch

import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.model_checkpoint import ModelCheckpoint
from distrib.checkpoint import Checkpoint, CheckpointManager, CheckpointOptions, CheckpointSaveError
from distrib.checkpoint.files import storage
from distrib.checkpoint.files.background import BackgroundWrite
from distrib.checkpoint.files.format import load_state

pytestmark = pytest.mark.timeout(120)
ASYNC = CheckpointOptions(enable_async=True)


class Gate:
    """Holds every background file write until `open` is called; records the order writes start and end."""

    def __init__(self, monkeypatch):
        self.opened = threading.Event()
        self.started = threading.Event()
        self.events = []
        real = storage.AtomicDirectory.write_with

        def gated(directory, name, produce):
            self.events.append(("start", directory.path))
            self.started.set()
            if threading.current_thread() is not threading.main_thread():
                assert self.opened.wait(60), "the test never opened the gate"
            try:
                return real(directory, name, produce)
            finally:
                self.events.append(("end", directory.path))
        monkeypatch.setattr(storage.AtomicDirectory, "write_with", gated)

    def open(self):
        self.opened.set()


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 3)


def test_a_background_save_holds_the_step_s_values_while_training_changes_them(tmp_path, monkeypatch):
    model = _model()
    manager = CheckpointManager(Checkpoint(model=model), str(tmp_path), max_to_keep=1)
    first = manager.save()
    gate = Gate(monkeypatch)
    at_save = {k: v.clone() for k, v in model.state_dict().items()}
    second = manager.save(options=ASYNC)  # returns while its write waits at the gate
    assert gate.started.wait(30)
    with torch.no_grad():
        model.weight.add_(1.0)  # the next training steps
    # nothing is published yet: the older checkpoint is still the latest and is still on disk
    assert manager.latest_checkpoint == first and os.path.isdir(first)
    assert distrib.train.latest_checkpoint(str(tmp_path)) == first
    gate.open()
    manager.sync()
    assert manager.latest_checkpoint == second and not os.path.exists(first)  # max_to_keep=1, after publishing
    saved = load_state(os.path.join(second, "state.safetensors"))["model"]
    assert all(torch.equal(saved[k], at_save[k]) for k in at_save)
    assert not torch.equal(saved["weight"], model.weight)


def test_at_most_one_save_is_in_flight(tmp_path, monkeypatch):
    model = _model()
    manager = CheckpointManager(Checkpoint(model=model), str(tmp_path), max_to_keep=3)
    gate = Gate(monkeypatch)
    waiting = threading.Event()
    real_wait = BackgroundWrite.wait

    def wait(self):
        waiting.set()  # the next save is waiting for this one
        return real_wait(self)
    monkeypatch.setattr(BackgroundWrite, "wait", wait)
    first = manager.save(options=ASYNC)
    assert gate.started.wait(30)
    second = []
    saver = threading.Thread(target=lambda: second.append(manager.save(options=ASYNC)))
    saver.start()
    assert waiting.wait(30)
    assert gate.events == [("start", first)]  # the second save has not begun writing
    gate.open()
    saver.join(60)
    manager.sync()
    assert gate.events == [("start", first), ("end", first), ("start", second[0]), ("end", second[0])]
    assert manager.checkpoints == [first, second[0]]


def test_a_failed_background_write_is_raised_by_the_next_call_that_waits(tmp_path, monkeypatch):
    model = _model()
    manager = CheckpointManager(Checkpoint(model=model), str(tmp_path), max_to_keep=2)
    first = manager.save()

    def full(directory, name, produce):
        raise OSError(errno.ENOSPC, "No space left on device")  # final: not tried again
    monkeypatch.setattr(storage.AtomicDirectory, "write_with", full)
    manager.save(options=ASYNC)  # the error surfaces where the write is waited for
    with pytest.raises(CheckpointSaveError, match=r"could not write checkpoint .*ckpt-2: \[Errno 28\] No space left"):
        manager.sync()
    monkeypatch.undo()
    assert manager.latest_checkpoint == first and sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-1"]
    assert manager.save(options=ASYNC) == str(tmp_path / "ckpt-3")  # the manager goes on (as after a
    manager.sync()                                                  # failed blocking save, N moved on)
    assert manager.latest_checkpoint == str(tmp_path / "ckpt-3")


def test_options_are_checked():
    with pytest.raises(TypeError, match="options must be a distrib.train.CheckpointOptions"):
        Checkpoint(model=_model()).write("/tmp/never", options={"enable_async": True})
    assert CheckpointOptions(experimental_enable_async_checkpoint=True).background
    with pytest.raises(TypeError, match="BackupAndRestore: options must be"):
        BackupAndRestore("/tmp/never", options=True)


_KILLED_MID_WRITE = textwrap.dedent("""
    import sys, threading
    import torch
    from distrib.checkpoint import Checkpoint, CheckpointManager, CheckpointOptions
    from distrib.checkpoint.files import storage

    directory = sys.argv[1]
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)
    manager = CheckpointManager(Checkpoint(model=model), directory, max_to_keep=1)
    manager.save()
    real = storage.AtomicDirectory.write_with

    def half_then_hang(d, name, produce):
        def half(handle, on_write):
            handle.write(b"\\0" * 4096)  # part of the file is on disk
            handle.flush()
            print("writing", flush=True)
            threading.Event().wait()  # killed here
        return real(d, name, half)
    storage.AtomicDirectory.write_with = half_then_hang
    with torch.no_grad():
        model.weight.add_(1.0)
    manager.save(options=CheckpointOptions(enable_async=True))
    threading.Event().wait()
""")


def test_a_process_killed_mid_write_leaves_the_previous_checkpoint(tmp_path):
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_MID_WRITE)
    directory = tmp_path / "ckpts"
    child = subprocess.Popen([sys.executable, str(script), str(directory)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 90)
        line = child.stdout.readline().strip() if ready else ""
    finally:
        child.kill()
        child.wait(30)
    assert line == "writing", child.stderr.read()[-3000:]
    names = sorted(os.listdir(directory))
    assert "ckpt-1" in names and "ckpt-2" not in names  # only a hidden temporary of ckpt-2 is left
    assert distrib.train.latest_checkpoint(str(directory)) == str(directory / "ckpt-1")
    model = _model()
    manager = CheckpointManager(Checkpoint(model=torch.nn.Linear(256, 256)), str(directory), max_to_keep=1)
    assert manager.restore_or_initialize() == str(directory / "ckpt-1")
    manager.save()  # the chief's next save sweeps the interrupted write's leftovers
    assert sorted(os.listdir(directory)) == ["checkpoint", "ckpt-2"]
    del model


# ----------------------------------------------------------------- the callbacks
EPOCHS, SAMPLES, BATCH = 3, 48, 8


def _data():
    rs = np.random.RandomState(0)
    x = rs.randn(SAMPLES, 5).astype("float32")
    return x, (x @ rs.randn(5, 1)).astype("float32")


def _keras_model():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Dropout(0.25), torch.nn.ReLU(),
                                              torch.nn.Linear(16, 1)))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    return model


class _StopAt(distrib.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if self.model.train_loop_state.global_step == self.step:
            raise KeyboardInterrupt(self.step)


def _fit(callbacks):
    model = _keras_model()
    x, y = _data()
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=True, verbose=0, callbacks=callbacks)
    return {k: v.detach().clone() for k, v in model.module.state_dict().items()}


def _save_threads_ended():
    for thread in threading.enumerate():
        if thread.name.startswith("distrib-save"):
            thread.join(60)


def test_backup_and_restore_in_the_background_resumes_bit_identical(tmp_path):
    reference = _fit([])
    backup = str(tmp_path / "backup")
    with pytest.raises(KeyboardInterrupt):
        _fit([BackupAndRestore(backup, save_freq=4, save_before_preemption=False, options=ASYNC), _StopAt(10)])
    _save_threads_ended()  # a crash would have ended them; in one test process they finish on their own
    resumed = BackupAndRestore(backup, save_freq=4, save_before_preemption=False, options=ASYNC)
    final = _fit([resumed])
    assert resumed.restored_from == os.path.join(backup, "backup-8")
    assert all(torch.equal(final[k], reference[k]) for k in reference)
    assert not os.path.exists(backup)  # fit waited for the last write, then deleted the backups


@pytest.mark.parametrize("weights_only", [True, False])
def test_model_checkpoint_in_the_background_writes_what_a_blocking_one_writes(tmp_path, weights_only):
    blocking = ModelCheckpoint(str(tmp_path / "now" / "ckpt_{epoch}"), save_weights_only=weights_only)
    background = ModelCheckpoint(str(tmp_path / "bg" / "ckpt_{epoch}"), save_weights_only=weights_only,
                                 options=ASYNC)
    _fit([blocking])
    _fit([background])
    name = "weights.safetensors" if weights_only else "state.safetensors"
    for epoch in range(1, EPOCHS + 1):
        now = storage.read_state_verified(str(tmp_path / "now" / f"ckpt_{epoch}"), name,
                                          storage.read_manifest(str(tmp_path / "now" / f"ckpt_{epoch}")))
        bg_path = str(tmp_path / "bg" / f"ckpt_{epoch}")
        later = storage.read_state_verified(bg_path, name, storage.read_manifest(bg_path))
        flat_now, flat_later = now if weights_only else now["module"], later if weights_only else later["module"]
        assert all(torch.equal(flat_now[k], flat_later[k]) for k in flat_now)
    assert background.saved_paths == [str(tmp_path / "bg" / f"ckpt_{e}") for e in range(1, EPOCHS + 1)]


def test_each_background_save_holds_its_own_step_though_the_copy_is_reused(tmp_path):
    model = _model()
    ckpt = Checkpoint(model=model)
    values = []
    for n in range(3):
        with torch.no_grad():
            model.weight.add_(1.0)
        values.append(model.weight.clone())
        ckpt.write(str(tmp_path / f"ckpt-{n}"), options=ASYNC)
        staging = ckpt.__dict__["_staging"]["model"]["weight"]
        if n:
            assert staging.data_ptr() == first_copy  # the previous copy, overwritten (after its write ended)
        else:
            first_copy = staging.data_ptr()
    ckpt.sync()
    for n in range(3):
        saved = load_state(str(tmp_path / f"ckpt-{n}" / "state.safetensors"))["model"]["weight"]
        assert torch.equal(saved, values[n])
