"""BackupAndRestore with Model.fit in one process: interrupted anywhere, resumed, bit-identical."""
import os
import signal

import numpy as np
import pytest
import torch

import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback
from distrib.checkpoint.preemption import RESTART_EXIT_CODE, exit_after_training

EPOCHS, SAMPLES, BATCH = 3, 48, 8  # 6 steps per epoch, 18 in all


class Interrupted(Exception):
    pass


class InterruptAt(Callback):
    """Raise (like a crash) right after global step ``step`` completed."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if self.model.train_loop_state.global_step == self.step:
            raise Interrupted(self.step)


class SigtermAt(Callback):
    """Send SIGTERM to this process while step ``step`` (1-based global) runs."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_begin(self, batch, logs=None):
        if self.model.train_loop_state.global_step + 1 == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture(autouse=True)
def keep_sigterm_handler():
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def _data():
    rs = np.random.RandomState(0)
    x = rs.randn(SAMPLES, 5).astype("float32")
    return x, (x @ rs.randn(5, 1)).astype("float32") + 0.1 * rs.randn(SAMPLES, 1).astype("float32")


def _model():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Dropout(0.25), torch.nn.ReLU(),
                                              torch.nn.Linear(16, 1)))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    return model


def _fit(model, callbacks):
    x, y = _data()
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=True, verbose=0, callbacks=callbacks)
    return {k: v.detach().clone() for k, v in model.module.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def reference():
    return _fit(_model(), [])


@pytest.mark.parametrize("save_freq,stop_at", [(4, 1), (4, 6), (4, 9), (4, 17), ("epoch", 7), ("epoch", 12)])
def test_interrupted_and_resumed_fit_is_bit_identical(tmp_path, reference, save_freq, stop_at):
    backup = str(tmp_path / "backup")
    torch.manual_seed(1234)  # a restarted process need not have the same RNG state: the backup restores it
    with pytest.raises(Interrupted):
        _fit(_model(), [BackupAndRestore(backup, save_freq=save_freq, save_before_preemption=False),
                        InterruptAt(stop_at)])
    torch.manual_seed(999)
    np.random.seed(999)
    resumed = BackupAndRestore(backup, save_freq=save_freq, save_before_preemption=False)
    final = _fit(_model(), [resumed])
    # the interruption comes at a batch end: after that step's save, before its epoch's end
    expected_backup = (stop_at // 4) * 4 if save_freq == 4 else ((stop_at - 1) // 6) * 6
    if expected_backup:
        assert resumed.restored_from == os.path.join(backup, f"backup-{expected_backup}")
    else:
        assert resumed.restored_from is None
    assert _same(final, reference)
    assert not os.path.exists(backup)  # deleted after the completed fit


def test_damaged_newest_backup_falls_back_and_still_matches(tmp_path, reference):
    backup = str(tmp_path / "backup")
    with pytest.raises(Interrupted):
        _fit(_model(), [BackupAndRestore(backup, save_freq=4, save_before_preemption=False), InterruptAt(14)])
    newest = os.path.join(backup, "backup-12", "state.safetensors")
    data = bytearray(open(newest, "rb").read())
    data[-5] ^= 0x01
    open(newest, "wb").write(bytes(data))
    resumed = BackupAndRestore(backup, save_freq=4, save_before_preemption=False)
    with pytest.warns(distrib.checkpoint.CheckpointWarning, match="backup-12"):
        final = _fit(_model(), [resumed])
    assert resumed.restored_from == os.path.join(backup, "backup-8")
    assert _same(final, reference)


def test_sigterm_saves_at_that_step_exits_75_and_resumes(tmp_path, reference):
    backup = str(tmp_path / "backup")
    with pytest.raises(SystemExit) as exit_info:
        _fit(_model(), [BackupAndRestore(backup, save_freq="epoch"), SigtermAt(10)])
    assert exit_info.value.code == RESTART_EXIT_CODE
    assert sorted(os.listdir(backup)) == ["backup-10", "backup-6", "checkpoint"]
    assert signal.getsignal(signal.SIGTERM) is not None
    resumed = BackupAndRestore(backup, save_freq="epoch")
    final = _fit(_model(), [resumed])
    assert resumed.restored_from == os.path.join(backup, "backup-10")
    assert _same(final, reference)


def test_keep_backup_when_asked_and_watcher_is_removed(tmp_path):
    backup = str(tmp_path / "backup")
    before = signal.getsignal(signal.SIGTERM)
    _fit(_model(), [BackupAndRestore(backup, save_freq=5, delete_checkpoint=False)])
    # The flag-setting watcher is gone; in place of the default handler a SIGTERM after the
    # completed fit now exits with status 0 (see test_preemption_after_training.py).
    expected = exit_after_training if before in (signal.SIG_DFL, None) else before
    assert signal.getsignal(signal.SIGTERM) is expected
    signal.signal(signal.SIGTERM, before)
    assert distrib.train.latest_checkpoint(backup) == os.path.join(backup, "backup-15")


def test_bad_arguments():
    with pytest.raises(ValueError, match="save_freq must be 'epoch' or a positive int"):
        BackupAndRestore("/tmp/x", save_freq=0)
    with pytest.raises(ValueError, match="backup_dir is required"):
        BackupAndRestore("")


def test_steps_per_execution_backs_up_where_an_execution_reaches_save_freq(tmp_path):
    def fit(callbacks):
        model = _model()
        model.compile(optimizer="adam", loss="mse", metrics=["mae"], steps_per_execution=4)
        return _fit(model, callbacks)

    reference = fit([])
    backup = str(tmp_path / "backup")
    # executions end at global steps 4, 6 | 10, 12 | 16, 18; save_freq=5 is reached by those ending at 6, 10, 16
    with pytest.raises(Interrupted):
        fit([BackupAndRestore(backup, save_freq=5, save_before_preemption=False, max_to_keep=5), InterruptAt(12)])
    assert sorted(os.listdir(backup)) == ["backup-10", "backup-6", "checkpoint"]
    resumed = BackupAndRestore(backup, save_freq=5, save_before_preemption=False)
    final = fit([resumed])
    assert resumed.restored_from == os.path.join(backup, "backup-10")
    assert _same(final, reference)
