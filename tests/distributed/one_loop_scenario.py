"""One callback scenario run under any strategy: what the callbacks observe must not depend on it.

`record_scenario` trains a small regression twice with the same callbacks —
a `Recorder` of every hook (index and log keys), `History`,
`BackupAndRestore` and validation, ``steps_per_execution=2`` — first
interrupted at the end of epoch 1, then resumed from the backup — and
returns what the callbacks saw. Tests run it under MultiWorkerMirrored,
the parameter server and a one-process strategy and compare the records.

The data is given as the strategy's input takes it: a dataset of global
batches (replicated strategies) or a dataset function (the parameter server).
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List

import torch

import distrib

EPOCHS, STEPS, VAL_STEPS, BATCH = 4, 6, 2, 8


class Recorder(distrib.callbacks.Callback):
    """Every hook call as ``[hook, index or None, sorted log keys or None]``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: List[List[Any]] = []

    def _rec(self, hook: str, index: Any = None, logs: Any = None) -> None:
        self.calls.append([hook, index, None if logs is None else sorted(logs)])

    def on_train_begin(self, logs=None): self._rec("train_begin")
    def on_train_end(self, logs=None): self._rec("train_end", None, logs)
    def on_epoch_begin(self, epoch, logs=None): self._rec("epoch_begin", epoch)
    def on_epoch_end(self, epoch, logs=None): self._rec("epoch_end", epoch, logs)
    def on_train_batch_begin(self, batch, logs=None): self._rec("train_batch_begin", batch)
    def on_train_batch_end(self, batch, logs=None): self._rec("train_batch_end", batch, logs)
    def on_test_begin(self, logs=None): self._rec("test_begin")
    def on_test_end(self, logs=None): self._rec("test_end", None, logs)
    def on_test_batch_begin(self, batch, logs=None): self._rec("test_batch_begin", batch)
    def on_test_batch_end(self, batch, logs=None): self._rec("test_batch_end", batch, logs)


class Interrupted(Exception):
    """The first run's end (a task that stops there)."""


class Interrupt(distrib.callbacks.Callback):
    """Ends the first run at the end of epoch 1, after the backup of that epoch was written."""

    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1:
            raise Interrupted("interrupted after epoch 1")


def regression():
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1


def global_batches():
    """Replicated strategies: a dataset of global batches that repeats."""
    x, y = regression()
    return distrib.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat()


def per_worker_batches(ctx):
    """The parameter server: each worker's pipeline (shard of the same examples)."""
    x, y = regression()
    ds = distrib.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    return ds.batch(BATCH).repeat()


def record_scenario(strategy: Any, data: Callable[[], Any], backup_dir: str) -> Dict[str, Any]:
    """Run the scenario under ``strategy`` with ``data()`` as fit's input; returns what the callbacks saw."""
    runs = []
    for interrupted in (True, False):
        torch.manual_seed(1)
        with strategy.scope():
            model = distrib.Model(torch.nn.Linear(4, 1))
            model.compile(optimizer="sgd", loss="mse", metrics=["mae"], steps_per_execution=2)
        model.log_every = 4
        recorder = Recorder()
        backup = distrib.callbacks.BackupAndRestore(os.path.join(backup_dir, "backup"))
        callbacks = [backup, recorder] + ([Interrupt()] if interrupted else [])
        history = None
        try:
            history = model.fit(data(), epochs=EPOCHS, steps_per_epoch=STEPS, validation_data=data(),
                                validation_steps=VAL_STEPS, callbacks=callbacks, verbose=0)
        except Interrupted:
            pass
        runs.append({"calls": recorder.calls, "restored": backup.restored_from is not None,
                     "history": None if history is None else {"epoch": history.epoch,
                                                              "keys": sorted(history.history)},
                     "global_step": model.train_loop_state.global_step})
    return {"interrupted": runs[0], "resumed": runs[1]}


def mwms_task(backup_dir: str) -> Dict[str, Any]:
    """One worker of a MultiWorkerMirroredStrategy job (run by `distrib.testing.run_cluster`)."""
    strategy = distrib.MultiWorkerMirroredStrategy()
    return record_scenario(strategy, global_batches, os.path.join(backup_dir, "mwms"))


def expected_calls(first_epoch: int, last_epoch: int, train_begin: bool = True) -> List[List[Any]]:
    """The sequence every strategy must produce (6 steps in executions of 2, logs every 4 steps)."""
    keys, val_keys = ["loss", "mae"], ["loss", "mae", "val_loss", "val_mae"]
    calls: List[List[Any]] = [["train_begin", None, None]] if train_begin else []
    for epoch in range(first_epoch, last_epoch + 1):
        calls.append(["epoch_begin", epoch, None])
        for begin, end, logs in ((0, 1, None), (2, 3, keys), (4, 5, keys)):
            calls += [["train_batch_begin", begin, None], ["train_batch_end", end, logs]]
        calls += [["test_begin", None, None], ["test_batch_begin", 0, None], ["test_batch_end", 1, keys],
                  ["test_end", None, keys], ["epoch_end", epoch, val_keys]]
    return calls
