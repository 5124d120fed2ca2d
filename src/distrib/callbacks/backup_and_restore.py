"""`BackupAndRestore`: resume an interrupted `fit` at the exact step it reached.

A backup holds the model (module, optimizer, metrics), ``model.train_loop_state``
(epoch, step, global step, shuffle seed, data iterator position) and every
replica's RNG states, written atomically into ``backup_dir`` by the chief (see
`distrib.train.CheckpointManager`). On the next `fit` with the same
``backup_dir``, ``on_train_begin`` restores the newest complete backup and
`fit` continues from there: a run interrupted anywhere and resumed ends with
the same weights, bit for bit, as one never interrupted (CPU, same number of
workers).

When to save:

* ``save_freq="epoch"``: at the end of every epoch (after validation);
  resuming starts the next epoch.
* ``save_freq=N``: whenever the global step is a multiple of ``N``; resuming
  runs the rest of that epoch (and its validation and ``on_epoch_end``).
  With ``compile(steps_per_execution=k)`` the batch hooks run once per
  execution, so the backup is taken at the end of the execution that
  reaches the multiple.
* preemption (``save_before_preemption=True``): when SIGTERM reaches any
  worker, all workers agree at the next step boundary, save there, and exit
  with `distrib.process.exit_codes.RESTART_EXIT_CODE` (75) for the launcher to
  restart them.

Example — killed during epoch 2 of 3, then started again with the same command::

    >>> callbacks = [distrib.callbacks.BackupAndRestore("/tmp/backup", save_freq=30)]
    >>> model.fit(dataset, epochs=3, steps_per_epoch=70, callbacks=callbacks)
    # first run: backups at global steps 30, 60, ..., 150; SIGKILL at step 163
    # second run: restores global step 150 (epoch 2, step 10) and trains steps 151..210;
    # the final weights equal an uninterrupted run's. The backup is deleted at the end.

``backup_dir`` must be used for nothing else; every worker gets the same one.

Under elastic training (``distrib launch --elastic``) it also keeps an
in-memory snapshot when the step's vote asks for one: at most
``DISTRIB_ELASTIC_SNAPSHOT_EVERY`` global steps apart (100 by default), sooner
once the log since the last holds four times a snapshot's size, and at the
first step after the job changed size or while a joiner waits (never at an
epoch's last step): a replacement or joiner starts from the newest one and
replays the steps since from a survivor's log.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from distrib.callbacks._chief import is_chief, model_strategy
from distrib.callbacks.callback import Callback
from distrib.checkpoint.files import storage
from distrib.checkpoint.checkpoint import Checkpoint
from distrib.checkpoint.files.fs import check_backend, check_writable
from distrib.checkpoint.manager import CheckpointManager
from distrib.checkpoint.options import CheckpointOptions
from distrib.checkpoint.preemption import PreemptionWatcher, exit_for_restart
from distrib.checkpoint.rng import RNGState
from distrib.checkpoint.replica_state import ReplicaState
from distrib.comm.elastic import elastic_enabled
from distrib.process.task_env import FAILED_AT_ENV
from distrib.comm.elastic_abilities import elastic_abilities

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["BackupAndRestore"]


class _ModelState:
    """The model as a trackable, with metric states summed over replicas (so resume logs are right)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def state_dict(self) -> Dict[str, Any]:
        return self.model.state_dict(aggregate_metrics=True)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.model.load_state_dict(state)

    def tensors_restored_verbatim(self) -> List[Any]:
        return self.model.tensors_restored_verbatim()


def resumed_line(backup: str, epoch: int, step: int, failed_at: Optional[float] = None) -> str:
    """The chief's one line on resuming: where, and how long before the failure the backup was saved.

    ``epoch`` counts from 0 (printed from 1, as fit's progress does); ``failed_at`` defaults to the
    launcher's ``DISTRIB_FAILED_AT`` (a restarted group); the age is left out where either time is unknown.

    Example:
        >>> resumed_line("/nonexistent/backup-10", 1, 2, failed_at=None)
        'resumed at epoch 2, step 2 (from backup-10)'
    """
    where = f"resumed at epoch {epoch + 1}, step {step}"
    if failed_at is None:
        try:
            failed_at = float(os.environ[FAILED_AT_ENV])
        except (KeyError, ValueError):
            failed_at = None
    try:
        saved = os.path.getmtime(backup)
    except (OSError, ValueError):
        saved = None
    if failed_at is None or saved is None or failed_at < saved:
        return f"{where} (from {os.path.basename(backup.rstrip('/'))})"
    return f"{where} (backup saved {failed_at - saved:.0f} s before the failure)"


class BackupAndRestore(Callback):
    """Back up training state periodically and restore it when `fit` starts again.

    Args:
        backup_dir: local path or fsspec URL, used only for backups.
        save_freq: ``"epoch"`` or a positive number of steps.
        delete_checkpoint: remove ``backup_dir`` when `fit` completes.
        save_before_preemption: on SIGTERM, save at an agreed step and exit
            with the restart code.
        max_to_keep: backups kept; two by default, so a backup damaged after it
            was written still leaves an older one to resume from.
        options: a `distrib.train.CheckpointOptions`; ``enable_async=True``
            writes each backup in the background while the next steps run (at
            most one in flight; a preemption backup is always written at once).
    """

    def __init__(self, backup_dir: str, save_freq: Union[str, int] = "epoch", delete_checkpoint: bool = True,
                 save_before_preemption: bool = True, max_to_keep: int = 2, *,
                 options: Optional[CheckpointOptions] = None) -> None:
        super().__init__()
        self.options = CheckpointOptions.check(options, "BackupAndRestore")
        if not backup_dir:
            raise ValueError("BackupAndRestore: backup_dir is required")
        if save_freq != "epoch" and not (isinstance(save_freq, int) and not isinstance(save_freq, bool)
                                         and save_freq > 0):
            raise ValueError(f"BackupAndRestore: save_freq must be 'epoch' or a positive int, got {save_freq!r}")
        check_backend(str(backup_dir), "BackupAndRestore")
        self.backup_dir = str(backup_dir)
        self.save_freq = save_freq
        self.delete_checkpoint = delete_checkpoint
        self.save_before_preemption = save_before_preemption
        self.max_to_keep = max_to_keep
        self._manager: Optional[CheckpointManager] = None
        self._watcher: Optional[PreemptionWatcher] = None
        self._preempted = False
        self._last_step = 0  # global step at the last on_train_batch_end (or on_train_begin)
        #: The backup restored by the last ``on_train_begin`` (None on a fresh start).
        self.restored_from: Optional[str] = None

    # ------------------------------------------------------------- hooks
    def on_train_begin(self, logs: Any = None) -> None:
        check_writable(self.backup_dir, "BackupAndRestore")  # every task writes (the others to temporaries)
        strategy = self._strategy()
        checkpoint = Checkpoint(model=_ModelState(self.model), train_loop=self.model.train_loop_state,
                                rng=RNGState(strategy))
        # fit runs callbacks inside the model's strategy scope, so the manager sees that strategy.
        self._manager = CheckpointManager(checkpoint, self.backup_dir, max_to_keep=self.max_to_keep,
                                          checkpoint_name="backup")
        self._manager.snapshot_on_save = False  # elastic snapshots are taken every few steps below
        self._elastic = elastic_enabled()
        self._manager.snapshot_with(Checkpoint(train_loop=self.model.train_loop_state,
                                               replicas=ReplicaState(self.model, strategy)))
        self.restored_from = self._manager.restore_or_initialize()
        if self.restored_from is not None and is_chief(self.model):
            sys.stderr.write(resumed_line(self.restored_from, *self.model.train_loop_state.resume_point()) + "\n")
            sys.stderr.flush()
        self._manager.keep_snapshot()
        self._last_step = self.model.train_loop_state.global_step
        self._preempted = False
        if self.save_before_preemption:
            self._watcher = PreemptionWatcher().install()
            if self._manager.snapshot_kept:
                # attach now, so every later check rides in the gradient all-reduce: a replacement
                # started mid-training must issue exactly the collectives its predecessor did
                self._check_preemption()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._check_preemption():
            return
        step, last = self.model.train_loop_state.global_step, self._last_step
        self._last_step = step
        if isinstance(self.save_freq, int) and step // self.save_freq > last // self.save_freq:
            self._save()  # this execution reached a multiple of save_freq
        steps = self.params.get("steps")
        if self._elastic and steps is not None and batch + 1 < steps and self._snapshot_due():
            # elastic training: resuming here runs the same collectives as going on (not at an epoch's end)
            self._manager.keep_snapshot()  # type: ignore[union-attr]

    def _snapshot_due(self) -> bool:
        """When the step's vote asks for a snapshot: the chief decides (`distrib.comm.elastic.snapshot_policy`:
        at most every `snapshot_every` steps, sooner when the log grew large, the job changed size or a
        joiner waits) and every replica, a replaying one too, reads the same answer."""
        elastic = elastic_abilities(self._strategy().collective)
        return elastic is not None and elastic.snapshot_wanted()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._check_preemption():
            return
        if self.save_freq == "epoch":
            self._save()

    def on_train_end(self, logs: Any = None) -> None:
        self._stop_watching(training_finished=not self._preempted)
        if self._preempted or self._manager is None:
            return
        self._manager.sync()  # the last backup is published (and checked on every worker) first
        strategy = self._strategy()
        if self.delete_checkpoint:
            if strategy.is_chief:
                storage.remove(self.backup_dir)
            if strategy.multi_replica:
                strategy.collective.barrier()  # no worker starts another fit while the chief deletes
        self._manager = None

    # ----------------------------------------------------------- helpers
    def _strategy(self) -> "Strategy":
        strategy: Optional[Strategy] = model_strategy(self.model)
        if strategy is None:
            from distrib.strategies.default import get_strategy

            strategy = get_strategy()
        return strategy

    def _save(self, at_once: bool = False) -> Optional[str]:
        assert self._manager is not None, "BackupAndRestore: on_train_begin was not called"
        path = self._manager.save(checkpoint_number=self.model.train_loop_state.global_step,
                                  check_interval=False, options=None if at_once else self.options)
        if at_once:
            self._manager.sync()
        return path

    def _check_preemption(self) -> bool:
        if self._watcher is None or not self._watcher.agreed(self._strategy()):
            return False
        self._preempted = True
        self._save(at_once=True)
        self._stop_watching()
        exit_for_restart()
        return True  # pragma: no cover - exit_for_restart raises SystemExit

    def _stop_watching(self, training_finished: bool = False) -> None:
        if self._watcher is not None:
            self._watcher.uninstall(training_finished=training_finished)
            self._watcher = None
