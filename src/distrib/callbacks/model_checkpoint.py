"""`ModelCheckpoint`: save the model or its weights during `fit` (Keras's callback).

``filepath`` is formatted with ``epoch`` (counted from 1), ``batch`` (from 1,
for ``save_freq=N``) and the logged values, e.g. ``"ckpt_{epoch:02d}"`` or
``"best-{epoch:02d}-{val_loss:.2f}"``. Each save goes through
`distrib.Model.save_weights` (``save_weights_only=True``) or
`distrib.Model.save`: a directory committed atomically and verified, that
`distrib.train.latest_checkpoint` finds when names end in ``-N`` or ``_N``.

When:

* ``save_freq="epoch"``: at the end of every epoch (after validation, so
  ``val_*`` values can be monitored and used in ``filepath``);
* ``save_freq=N``: after every ``N`` training batches, using the newest
  global logs (those of the last log update, see ``Model.log_every``).

With ``save_best_only=True`` a save happens only when ``monitor`` improves
on the best value seen (``mode``: ``"auto"``/``"min"``/``"max"``; the first
value must beat ``initial_value_threshold`` when given). As in Keras, when
``monitor`` is not logged at all the callback warns and saves anyway.

Multi-worker: every worker runs the callback and takes the same decisions
(the logs are global), every worker takes part in the save, and only the
chief writes ``filepath``; messages are printed by the chief.

Example:
    >>> ckpt = distrib.callbacks.ModelCheckpoint("ckpts/ckpt_{epoch}", save_weights_only=True)
    >>> model.fit(dataset, epochs=3, callbacks=[ckpt])       # ckpts/ckpt_1, ckpt_2, ckpt_3
    >>> model.load_weights(distrib.train.latest_checkpoint("ckpts"))   # ckpts/ckpt_3
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Dict, Optional, Union

from distrib.callbacks._chief import model_strategy
from distrib.callbacks.callback import Logs
from distrib.callbacks.monitor import MonitorCallback
from distrib.checkpoint.agreement import chief_decides
from distrib.checkpoint.chief_directory import PendingDirectory
from distrib.checkpoint.options import CheckpointOptions

__all__ = ["ModelCheckpoint"]


class ModelCheckpoint(MonitorCallback):
    """Save the model (or its weights) at some frequency during `fit`.

    Args:
        filepath: the path to save to, a ``str.format`` template (see the module docstring).
        monitor: the logged quantity ``save_best_only`` watches.
        verbose: 1 prints a line for each save (chief only).
        save_best_only: only save when ``monitor`` improves.
        save_weights_only: save with ``save_weights`` instead of ``save``.
        mode: ``"auto"``, ``"min"`` or ``"max"`` (how ``monitor`` improves).
        save_freq: ``"epoch"`` or a number of training batches.
        initial_value_threshold: the value ``monitor`` must first beat.
        options: a `distrib.train.CheckpointOptions`; ``enable_async=True``
            writes each save in the background (the model is copied at the
            save, the next save or the end of `fit` waits for the write).
    """

    def __init__(self, filepath: Union[str, os.PathLike], monitor: str = "val_loss", verbose: int = 0,
                 save_best_only: bool = False, save_weights_only: bool = False, mode: str = "auto",
                 save_freq: Union[str, int] = "epoch", initial_value_threshold: Optional[float] = None,
                 *, options: Optional[CheckpointOptions] = None) -> None:
        super().__init__(monitor=monitor, mode=mode)
        self.options = CheckpointOptions.check(options, "ModelCheckpoint")
        self._pending: Optional[PendingDirectory] = None
        self.filepath = os.fspath(filepath)
        if not self.filepath:
            raise ValueError("ModelCheckpoint: filepath is empty; give a path such as 'ckpts/ckpt_{epoch}'")
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f"ModelCheckpoint: save_freq must be 'epoch' or a number of batches >= 1, "
                             f"got {save_freq!r}")
        self.verbose = int(verbose)
        self.save_best_only = bool(save_best_only)
        self.save_weights_only = bool(save_weights_only)
        self.save_freq = save_freq
        self.best: Optional[float] = None if initial_value_threshold is None else float(initial_value_threshold)
        self._epoch = 0
        self._batches_since_save = 0
        self._last_logs: Dict[str, Any] = {}
        #: Paths saved by this callback during fit, in order.
        self.saved_paths: list = []

    def on_epoch_begin(self, epoch: int, logs: Logs = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: Logs = None) -> None:
        if logs:
            self._last_logs = dict(logs)
        if self.save_freq == "epoch":
            return
        self._batches_since_save += 1
        if self._batches_since_save >= self.save_freq:
            self._batches_since_save = 0
            self._save(self._epoch, batch, self._last_logs)

    def on_epoch_end(self, epoch: int, logs: Logs = None) -> None:
        if self.save_freq == "epoch":
            self._save(epoch, None, dict(logs or {}))

    def on_train_end(self, logs: Logs = None) -> None:
        self._wait_for_write()  # fit returns with every save on disk

    def _wait_for_write(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.wait()

    def _path(self, epoch: int, batch: Optional[int], logs: Dict[str, Any]) -> str:
        values = {k: v for k, v in logs.items() if k not in ("epoch", "batch")}
        try:
            if batch is None:
                return self.filepath.format(epoch=epoch + 1, **values)
            return self.filepath.format(epoch=epoch + 1, batch=batch + 1, **values)
        except KeyError as e:
            raise KeyError(f"ModelCheckpoint: filepath {self.filepath!r} refers to {e.args[0]!r}, which is not "
                           f"logged here; available: epoch{', batch' if batch is not None else ''}, "
                           f"{', '.join(values) or 'nothing else'}") from None

    def _save(self, epoch: int, batch: Optional[int], logs: Dict[str, Any]) -> None:
        self._wait_for_write()  # at most one save in flight
        strategy = model_strategy(self.model)
        role = strategy.checkpoint_role() if strategy is not None and strategy.multi_replica else None
        # whether to save, and where, is the chief's decision: every worker takes part in the save
        decision = chief_decides(role, "ModelCheckpoint's save", lambda: self._decide(epoch, batch, logs))
        if decision is None:
            return
        path, best = decision
        if best is not None:
            self.best = float(best)
        options = self.options if self.options.background else None
        if self.save_weights_only:
            self._pending = self.model.save_weights(path, overwrite=True, options=options)
        else:
            self._pending = self.model.save(path, overwrite=True, options=options)
        self.saved_paths.append(path)

    def _decide(self, epoch: int, batch: Optional[int], logs: Dict[str, Any]) -> Optional[list]:
        """``[path, new best or None]`` to save now, or None to skip; printed here (on the chief)."""
        path = self._path(epoch, batch, logs)
        if not self.save_best_only:
            if self.verbose > 0:
                print(f"\nEpoch {epoch + 1}: saving model to {path}", flush=True)
            return [path, None]
        current = self._monitored(logs)
        if current is None:  # Keras warns (in _monitored) and saves, as with save_best_only=False
            return [path, None]
        if not self._is_improvement(current, self.best):
            if self.verbose > 0:
                print(f"\nEpoch {epoch + 1}: {self.monitor} did not improve from {self._best_text()}", flush=True)
            return None
        if self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: {self.monitor} improved from {self._best_text()} to {current:.5f}, "
                  f"saving model to {path}", flush=True)
        return [path, float(current)]

    def _best_text(self) -> str:
        if self.best is not None:
            return f"{self.best:.5f}"
        return "inf" if self._minimising else "-inf"

    def _monitored(self, logs: Optional[Dict[str, Any]]) -> Optional[float]:
        if logs is not None and self.monitor not in logs:
            warnings.warn(f"ModelCheckpoint: can save best model only with {self.monitor} available; "
                          f"logged: {', '.join(logs) or 'none'} (monitor a logged value, e.g. 'loss', or "
                          "give fit validation_data)", stacklevel=3)
            return None
        return super()._monitored(logs)
