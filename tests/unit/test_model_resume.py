"""fit resumes exactly from a restored `train_loop_state` (the contract BackupAndRestore relies on)."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import distrib
from distrib.data import Dataset

X = np.random.default_rng(0).normal(size=(30, 4)).astype(np.float32)
Y = (np.abs(X[:, 0] * 2).astype(np.int64) % 3)


def _model(seed):
    torch.manual_seed(seed)
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 3))
    model = distrib.Model(module)
    model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


class _Snapshot(distrib.callbacks.Callback):
    """What a backup holds, captured after global step ``at_step`` or at the end of epoch ``at_epoch``."""

    def __init__(self, at_step=None, at_epoch=None):
        super().__init__()
        self.at_step, self.at_epoch, self.saved = at_step, at_epoch, None

    def _capture(self):
        self.saved = copy.deepcopy({"model": self.model.state_dict(aggregate_metrics=True),
                                    "loop": self.model.train_loop_state.state_dict(),
                                    "rng": torch.get_rng_state()})

    def on_train_batch_end(self, batch, logs=None):
        if self.model.train_loop_state.global_step == self.at_step:
            self._capture()

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.at_epoch:
            self._capture()


class _Restore(distrib.callbacks.Callback):
    def __init__(self, saved):
        super().__init__()
        self.saved = saved

    def on_train_begin(self, logs=None):
        self.model.load_state_dict(copy.deepcopy(self.saved["model"]))
        self.model.train_loop_state.load_state_dict(copy.deepcopy(self.saved["loop"]))
        torch.set_rng_state(self.saved["rng"])


def _arrays(**fit_kwargs):
    return lambda model, callbacks: model.fit(X, Y, batch_size=8, epochs=3, callbacks=callbacks, verbose=0,
                                              **fit_kwargs)


def _repeated_dataset(model, callbacks):
    dataset = Dataset.from_tensor_slices((X, Y)).shuffle(30).repeat().batch(8)
    return model.fit(dataset, epochs=3, steps_per_epoch=5, callbacks=callbacks, verbose=0)


@pytest.mark.parametrize("run", [_arrays(), _arrays(steps_per_epoch=3), _repeated_dataset],
                         ids=["arrays", "arrays-steps", "dataset-repeat"])
@pytest.mark.parametrize("where", [{"at_step": 6}, {"at_epoch": 0}, {"at_step": 4}, {"at_epoch": 1}],
                         ids=["mid-epoch", "epoch-end", "step-4", "epoch-1-end"])
def test_resumed_fit_ends_with_the_uninterrupted_weights_and_logs(run, where):
    reference = _model(0)
    snapshot = _Snapshot(**where)
    full = run(reference, [snapshot])
    assert snapshot.saved is not None
    resumed = _model(1)  # different initial weights and RNG: everything must come from the backup
    rest = run(resumed, [_Restore(snapshot.saved)])
    for a, b in zip(reference.get_weights(), resumed.get_weights()):
        np.testing.assert_array_equal(a, b)
    done_epochs = len(full.history["loss"]) - len(rest.history["loss"])
    for name, values in rest.history.items():
        assert values == pytest.approx(full.history[name][done_epochs:], rel=1e-12), name
    assert resumed.train_loop_state.global_step == reference.train_loop_state.global_step


def test_backup_and_restore_callback_resumes_an_interrupted_fit(tmp_path):
    reference = _model(0)
    _arrays()(reference, [])

    class Crash(distrib.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if self.model.train_loop_state.global_step == 7:
                raise KeyboardInterrupt("simulated preemption")
    interrupted = _model(0)
    backup = distrib.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=2)
    with pytest.raises(KeyboardInterrupt):
        _arrays()(interrupted, [backup, Crash()])
    resumed = _model(5)
    _arrays()(resumed, [distrib.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=2)])
    for a, b in zip(reference.get_weights(), resumed.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert not (tmp_path / "backup").exists()


@pytest.mark.parametrize("garbage", ["7", -1, 2.5, True, [1]])
def test_a_forged_pass_position_in_a_backup_is_one_error_line(garbage):
    """The data position comes from a file: a forged ``pass_steps`` is refused, named, before any step."""
    snapshot = _Snapshot(at_step=4)
    _arrays(steps_per_epoch=3)(_model(0), [snapshot])
    snapshot.saved["loop"]["iterator"]["pass_steps"] = garbage
    resumed = _model(1)
    with pytest.raises(ValueError, match=r"^data position: pass_steps must be an int >= 0, got ") as caught:
        _arrays(steps_per_epoch=3)(resumed, [_Restore(snapshot.saved)])
    assert "\n" not in str(caught.value)
    assert resumed.train_loop_state.global_step == 4          # restored, and no step ran after it
