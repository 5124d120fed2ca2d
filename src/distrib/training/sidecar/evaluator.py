"""`SidecarEvaluator`: evaluate a training job's checkpoints from a separate task.

The ``evaluator`` task of a cluster (``TF_CONFIG`` task type ``evaluator``,
or ``distrib launch --evaluator``) takes no part in training: its strategy
has one local replica and never joins the training tasks' rendezvous, so it
can neither slow nor block them, and its death does not stop the job. It
watches the directory the chief saves into with `distrib.train.CheckpointManager`
(or `Checkpoint.save`), `ModelCheckpoint` (``<dir>/ckpt-{epoch}``, weights only
or full saves) or `BackupAndRestore` (its ``backup-<N>``, used when there is no
``ckpt-<N>``) and evaluates each new checkpoint once, oldest first:

* only complete checkpoints: each ``<prefix>-<N>`` is verified (``COMPLETE``
  marker and checksums) before it is read; a damaged one is skipped with a
  warning once a newer one exists (the newest is retried on the next poll);
* exactly once, across restarts: after each evaluation the checkpoint's name
  and metrics are appended to ``<log_dir>/eval/sidecar_state.json`` (atomic
  replace); a restarted evaluator skips what it lists and everything older.
  An evaluator killed mid-evaluation evaluates that checkpoint again on restart;
  only the finished evaluation is recorded;
* metrics: one printed line per checkpoint and TensorBoard scalars (tag = the
  metric's name, step = ``N``) under ``<log_dir>/eval``;
* stop (TF's rule): after evaluating a checkpoint whose number ``N`` is
  ``>= max_evaluations`` (with `CheckpointManager.save` once per epoch,
  ``N`` is the epoch count, so pass the number of training epochs), or when
  no new checkpoint appeared for ``timeout`` seconds. With neither, it runs
  until it is stopped.

What it finds but cannot use (a file or directory that is not a distrib
checkpoint named ``<prefix>-<N>``, e.g. TensorFlow's ``ckpt-1.index``) it names
in one line, once per new name, instead of waiting silently.

A checkpoint that the chief's ``max_to_keep`` deletes before the evaluator
gets to it is not evaluated (keep more checkpoints if every one matters).

Example (the evaluator task of the same script the workers run)::

    strategy = distrib.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = distrib.Model(build_model())
        model.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    if strategy.cluster_resolver.task_type == "evaluator":
        distrib.SidecarEvaluator(model, eval_dataset, checkpoint_dir="/ckpts",
                                 max_evaluations=epochs, log_dir="/logs").start()
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

from distrib.checkpoint.files import storage
from distrib.checkpoint.discovery import numbered_checkpoints
from distrib.checkpoint.files.storage import CheckpointWarning, CorruptCheckpointError
from distrib.training.sidecar.layouts import BACKUP_PREFIX, NotAModelCheckpoint, model_weights, unusable_entries
from distrib.errors import DistribError, first_line
from distrib.training.sidecar.state import STATE_FILE as SIDECAR_STATE_FILE
from distrib.training.sidecar.state import SidecarState

__all__ = ["SidecarEvaluator", "SidecarEvaluatorError", "EVAL_DIR"]

EVAL_DIR = "eval"


class SidecarEvaluatorError(DistribError, RuntimeError):
    """A checkpoint cannot be loaded into the evaluator's model."""


class SidecarEvaluator:
    """Evaluates every new checkpoint of a training job (``tf.keras.utils.SidecarEvaluator``).

    Args:
        model: a compiled `distrib.Model` with the training model's architecture.
        data: what ``model.evaluate`` accepts (a `distrib.data.Dataset`, arrays, ...).
        checkpoint_dir: the directory the chief saves checkpoints into.
        steps: evaluation steps per checkpoint (None: the whole data).
        max_evaluations: stop after a checkpoint numbered ``>= max_evaluations``.
        callbacks: passed to every ``model.evaluate`` call.
        log_dir: where ``eval/`` (TensorBoard events, state file) goes
            (default: ``checkpoint_dir``).
        checkpoint_prefix: the checkpoints' name prefix (``ckpt`` for
            `CheckpointManager`; None accepts any ``<prefix>-<N>``).
        model_key: the name the model is tracked under in the training
            `Checkpoint` (TensorFlow's multi-worker tutorials use ``model=``).
        poll_interval: seconds between directory listings.
        timeout: stop when no new checkpoint appeared for this many seconds.
    """

    def __init__(self, model: Any, data: Any, checkpoint_dir: str, steps: Optional[int] = None,
                 max_evaluations: Optional[int] = None, callbacks: Optional[Sequence[Any]] = None, *,
                 log_dir: Optional[str] = None, checkpoint_prefix: Optional[str] = "ckpt",
                 model_key: str = "model", poll_interval: float = 1.0,
                 timeout: Optional[float] = None) -> None:
        from distrib.training.model import Model

        if not isinstance(model, Model):
            raise TypeError(f"SidecarEvaluator: model must be a compiled distrib.Model, "
                            f"got {type(model).__name__}; wrap it: distrib.Model(module) and compile it")
        if max_evaluations is not None and (isinstance(max_evaluations, bool)
                                            or not isinstance(max_evaluations, int) or max_evaluations < 1):
            raise ValueError(f"SidecarEvaluator: max_evaluations must be a positive int or None, "
                             f"got {max_evaluations!r}")
        if poll_interval <= 0:
            raise ValueError(f"SidecarEvaluator: poll_interval must be > 0, got {poll_interval!r}")
        self.model = model
        self.data = data
        self.checkpoint_dir = str(checkpoint_dir)
        self.steps = steps
        self.max_evaluations = max_evaluations
        self.callbacks = list(callbacks or [])
        self.eval_dir = storage.join(str(log_dir) if log_dir is not None else self.checkpoint_dir, EVAL_DIR)
        self.checkpoint_prefix = checkpoint_prefix
        self.model_key = model_key
        self.poll_interval = float(poll_interval)
        self.timeout = timeout
        self._state = SidecarState.load(storage.join(self.eval_dir, SIDECAR_STATE_FILE))
        self._skipped: set = set()
        self._reported: set = set()
        self._writer: Any = None

    @property
    def evaluated(self) -> List[Dict[str, Any]]:
        """Every recorded evaluation (this run's and earlier runs'), oldest first."""
        return [dict(e) for e in self._state.evaluated]

    def start(self) -> List[Dict[str, Any]]:
        """Watch and evaluate until a stop condition holds; returns this call's evaluations."""
        done_now: List[Dict[str, Any]] = []
        if self._finished():
            return done_now
        last_new = time.monotonic()
        try:
            while True:
                progressed = False
                for number, path in self._pending():
                    entry = self._evaluate(number, path)
                    if entry is None:
                        continue
                    done_now.append(entry)
                    progressed = True
                    if self._finished():
                        self._say(f"checkpoint {entry['checkpoint']} reached max_evaluations="
                                  f"{self.max_evaluations}; stopping")
                        return done_now
                if progressed:
                    last_new = time.monotonic()
                elif self.timeout is not None and time.monotonic() - last_new >= self.timeout:
                    self._say(f"no new checkpoint in {self.checkpoint_dir} for {self.timeout:g} s; stopping")
                    return done_now
                time.sleep(self.poll_interval)  # poll: the directory is watched, not notified
        finally:
            if self._writer is not None:
                self._writer.close()
                self._writer = None

    # -- internals --------------------------------------------------------

    def _finished(self) -> bool:
        if self.max_evaluations is None or not self._state.evaluated:
            return False
        return max(e["number"] for e in self._state.evaluated) >= self.max_evaluations

    def _pending(self) -> List[Tuple[int, str]]:
        done = self._state.names()
        newest_done = max((e["number"] for e in self._state.evaluated), default=-1)
        listed = self._listed()
        self._report_unusable()
        return [(n, p) for n, p in listed
                if n > newest_done and _name(p) not in done and p not in self._skipped]

    def _listed(self) -> List[Tuple[int, str]]:
        """The ``<prefix>-<N>`` checkpoints; with the default prefix and none of them, BackupAndRestore's."""
        listed = numbered_checkpoints(self.checkpoint_dir, self.checkpoint_prefix)
        if not listed and self.checkpoint_prefix == "ckpt":
            listed = numbered_checkpoints(self.checkpoint_dir, BACKUP_PREFIX)
        return listed

    def _report_unusable(self) -> None:
        names = [n for n in unusable_entries(self.checkpoint_dir, self.checkpoint_prefix, self.eval_dir)
                 if n not in self._reported]
        if names:
            self._reported.update(names)
            shown = ", ".join(sorted(names)[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            self._say(f"cannot use {shown} in {self.checkpoint_dir}: not a distrib checkpoint named "
                      f"{self.checkpoint_prefix or '<prefix>'}-<N> (CheckpointManager, "
                      f"ModelCheckpoint('{self.checkpoint_dir}/{self.checkpoint_prefix or 'ckpt'}-{{epoch}}'), "
                      f"BackupAndRestore); ignoring it")

    def _evaluate(self, number: int, path: str) -> Optional[Dict[str, Any]]:
        try:
            manifest = storage.verify(path)  # every file, streamed
            state = model_weights(path, manifest, self.model_key)
        except NotAModelCheckpoint as exc:  # complete, but holds no model weights
            if exc.fatal:
                raise SidecarEvaluatorError(f"{path}: {exc}") from None
            self._say(f"cannot use {_name(path)}: {exc}; skipping it")
            self._skipped.add(path)
            return None
        except (CorruptCheckpointError, FileNotFoundError, KeyError, ValueError, OSError) as exc:
            newer = [n for n, _ in self._listed() if n > number]
            if newer:
                warnings.warn(f"SidecarEvaluator: skipping {path}: {exc}", CheckpointWarning, stacklevel=2)
                self._skipped.add(path)
            return None  # the newest may still be in flight on a non-atomic store: retried next poll
        self._load(path, state)
        logs = self.model.evaluate(self.data, steps=self.steps, callbacks=self.callbacks,
                                   verbose=0, return_dict=True)
        metrics = {k: float(v) for k, v in logs.items() if _is_number(v)}
        self._state.add(_name(path), number, metrics)
        self._state.save()
        self._summaries(number, metrics)
        shown = " ".join(f"{k}={v:.6g}" for k, v in metrics.items())
        self._say(f"evaluated {_name(path)}: {shown}")
        return dict(self._state.evaluated[-1])

    def _load(self, path: str, weights: Any) -> None:
        try:
            self.model.module.load_state_dict(weights)
        except Exception as exc:
            first = first_line(exc)
            raise SidecarEvaluatorError(f"{path}: {self.model_key!r} does not fit the evaluator's model: "
                                        f"{first}; build the same architecture as the training tasks") from exc

    def _summaries(self, number: int, metrics: Dict[str, float]) -> None:
        if self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                return
            os.makedirs(self.eval_dir, exist_ok=True)
            self._writer = SummaryWriter(log_dir=self.eval_dir)
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, global_step=number)
        self._writer.flush()

    @staticmethod
    def _say(text: str) -> None:
        sys.stdout.write(f"SidecarEvaluator: {text}\n")
        sys.stdout.flush()


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True
