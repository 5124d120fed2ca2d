"""A full disk and a read-only checkpoint directory (issue 52, item 4).

Each test mounts a 2 MiB tmpfs (skipped where mounting is not permitted:
not root, no CAP_SYS_ADMIN) and fills it *during* a checkpoint write: the
first buffer the writer sends to the new file takes the disk's last free
bytes with a filler file, as another process writing beside it would. Then:
one `CheckpointSaveError` naming the checkpoint and ENOSPC, the previous
checkpoint intact, verified and restorable, nothing partial listed or found
by `latest_checkpoint`, and no temporary left behind (the space is freed).
Once the filler is removed, saving works again. A read-only directory is
named by `BackupAndRestore` before the first step (`CheckpointDirectoryError`).
"""
import os
import subprocess
import uuid

import numpy as np
import pytest
import torch

import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback
from distrib.checkpoint.files import safetensors_io, storage
from distrib.checkpoint.checkpoint import CheckpointSaveError
from distrib.checkpoint.files.fs import CheckpointDirectoryError

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def small_fs(tmp_path):
    """A fresh 2 MiB tmpfs at ``tmp_path/mnt`` (and a way to remount it read-only); unmounted afterwards."""
    mnt = tmp_path / f"mnt-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2M", "tmpfs", str(mnt)], capture_output=True,
                          text=True, timeout=30)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()[:200]}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


class Filler:
    """Fills the filesystem the first time the checkpoint writer sends a buffer to a file under ``target``."""

    def __init__(self, mnt, monkeypatch, target):
        self.path, self.fired = mnt / "filler", False
        real = safetensors_io._emit

        def emit(handle, data, on_write):
            if not self.fired and target in getattr(handle, "name", ""):
                self.fired = True
                self.fill()
            return real(handle, data, on_write)
        monkeypatch.setattr(safetensors_io, "_emit", emit)

    def fill(self):
        with open(self.path, "wb") as f:
            try:
                while True:
                    f.write(b"\xff" * 65536)
                    f.flush()
            except OSError:
                pass
            try:
                while True:
                    f.write(b"\xff")
                    f.flush()
            except OSError:
                pass

    def free(self):
        os.remove(self.path)


def _objects(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(200, 200)  # 160 KB of weights, 320 KB more of Adam state
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(2, 200)).sum().backward()
    opt.step()
    return model, opt


def _leftovers(directory):
    return [n for n in os.listdir(directory) if n.startswith(".")]


def _assert_previous_intact(directory, previous, expected):
    storage.verify(previous)
    assert distrib.train.latest_checkpoint(str(directory)) == previous
    fresh, fresh_opt = _objects(7)
    distrib.train.Checkpoint(model=fresh, optimizer=fresh_opt).restore(previous).assert_consumed()
    assert all(torch.equal(expected[k], v) for k, v in fresh.state_dict().items())


@pytest.mark.parametrize("background", [False, True], ids=["blocking", "background"])
def test_a_disk_filled_during_a_save_fails_by_name_and_keeps_the_previous_checkpoint(small_fs, monkeypatch,
                                                                                   background):
    directory = small_fs / "ckpts"
    model, opt = _objects(1)
    manager = distrib.train.CheckpointManager(distrib.train.Checkpoint(model=model, optimizer=opt),
                                              str(directory), max_to_keep=3)
    options = distrib.train.CheckpointOptions(enable_async=background)
    first = manager.save(options=options)
    manager.sync()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    filler = Filler(small_fs, monkeypatch, ".ckpt-2.tmp-")
    model(torch.ones(2, 200)).sum().backward()
    opt.step()
    with pytest.raises(CheckpointSaveError) as caught:
        manager.save(options=options)
        manager.sync()  # a background write's error comes out where the save is waited for
    assert filler.fired
    message = str(caught.value)
    assert "\n" not in message and "ckpt-2" in message and "No space left on device" in message, message
    assert _leftovers(directory) == []  # the partial checkpoint's temporary directory is gone
    assert manager.latest_checkpoint == first and manager.checkpoints == [first]
    _assert_previous_intact(directory, first, expected)
    filler.free()  # space again: the next save works
    later = manager.save()
    storage.verify(later)
    assert manager.latest_checkpoint == later


class Steps(Callback):
    def __init__(self):
        super().__init__()
        self.count = 0

    def on_train_batch_end(self, batch, logs=None):
        self.count += 1


def _fit_model():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(200, 200), torch.nn.Linear(200, 4)))
    model.compile(optimizer="adam", loss="mse")
    return model


def _data():
    rs = np.random.RandomState(0)
    return rs.rand(64, 200).astype("float32"), rs.rand(64, 4).astype("float32")


def test_a_disk_filled_during_a_backup_stops_fit_by_name_and_the_next_fit_resumes(small_fs, monkeypatch):
    """`BackupAndRestore`: the save's error ends `fit` (the run stops where it could no longer be backed up);
    the older backup is intact, and a new `fit` once there is space resumes from it."""
    directory = small_fs / "backup"
    filler = Filler(small_fs, monkeypatch, ".backup-4.tmp-")
    x, y = _data()
    steps = Steps()
    with pytest.raises(CheckpointSaveError, match=r"backup-4: \[Errno 28\] No space left on device"):
        _fit_model().fit(x, y, batch_size=16, epochs=2, verbose=0,
                         callbacks=[steps, BackupAndRestore(str(directory), save_freq=2)])
    assert filler.fired and steps.count == 4
    assert _leftovers(directory) == []
    assert sorted(os.listdir(directory)) == ["backup-2", "checkpoint"]
    storage.verify(str(directory / "backup-2"))
    filler.free()
    again = BackupAndRestore(str(directory), save_freq=2)
    resumed = Steps()
    _fit_model().fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[again, resumed])
    assert again.restored_from == str(directory / "backup-2") and resumed.count == 6


def test_a_read_only_backup_directory_is_named_before_the_first_step(small_fs):
    (small_fs / "backup").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True, capture_output=True, timeout=30)
    x, y = _data()
    for where in ("backup", "backup/new"):  # an existing directory, and one still to be made
        steps = Steps()
        with pytest.raises(CheckpointDirectoryError, match=rf"BackupAndRestore: cannot write checkpoints to "
                                                           rf"'{small_fs / where}' \(Read-only file system\)"):
            _fit_model().fit(x, y, batch_size=16, epochs=2, verbose=0,
                             callbacks=[BackupAndRestore(str(small_fs / where), save_freq=2), steps])
        assert steps.count == 0
