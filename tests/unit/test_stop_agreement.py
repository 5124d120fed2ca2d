"""Which fits must agree `stop_training` after every step: only those running user code during the epoch."""
from __future__ import annotations

import torch

import distrib
from distrib.training.execution.stop_agreement import may_stop_during_epoch


class UserStopper(distrib.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        self.model.stop_training = batch >= 3


class UserEpochLogger(distrib.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        pass


class UserCheckpoint(distrib.callbacks.ModelCheckpoint):
    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)


class StepModel(distrib.Model):
    def train_step(self, data, global_batch_size):
        return super().train_step(data, global_batch_size)


def _model(cls=distrib.Model):
    return cls(torch.nn.Linear(2, 1))


def test_distribs_own_callbacks_need_no_per_step_agreement(tmp_path):
    own = [distrib.callbacks.ProgbarLogger(), distrib.callbacks.History(),
           distrib.callbacks.ModelCheckpoint(str(tmp_path / "ckpt"), save_freq=2),
           distrib.callbacks.BackupAndRestore(str(tmp_path / "backup")), distrib.callbacks.EarlyStopping(),
           distrib.callbacks.TerminateOnNaN(), UserEpochLogger()]
    assert not may_stop_during_epoch(own, _model())


def test_user_code_during_the_epoch_needs_it(tmp_path):
    assert may_stop_during_epoch([UserStopper()], _model())
    assert may_stop_during_epoch([UserCheckpoint(str(tmp_path / "c"))], _model())
    assert may_stop_during_epoch([distrib.callbacks.LambdaCallback(on_train_batch_end=lambda b, l: None)], _model())
    assert not may_stop_during_epoch([distrib.callbacks.LambdaCallback(on_epoch_end=lambda e, l: None)], _model())
    assert may_stop_during_epoch([], _model(StepModel))
