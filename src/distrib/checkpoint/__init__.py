"""Checkpoints: safe format, atomic storage, `Checkpoint`/`CheckpointManager`, RNG state, preemption.

The user-facing names live in `distrib.train` (TF's ``tf.train``); this
package also offers the building blocks other parts of distrib use:

- `save_state` / `load_state`: a nested state in one safetensors file (never pickle).
- `AtomicDirectory`, `is_complete`, `verify`: all-or-nothing, checksummed directories.
- `write_path_for`: where a worker writes (the chief: the path; others: a private temp dir).
- `RNGState`: every replica's RNG states as a trackable.
- `PreemptionWatcher`: SIGTERM flag plus cross-worker agreement.
"""
from __future__ import annotations

from distrib.checkpoint.checkpoint import (Checkpoint, CheckpointLoadStatus, CheckpointRestoreError,
                                           CheckpointSaveError)
from distrib.checkpoint.discovery import latest_checkpoint
from distrib.checkpoint.files.format import UnsafeFileError, dumps_state, load_state, loads_state, save_state
from distrib.checkpoint.manager import CheckpointManager
from distrib.checkpoint.options import CheckpointOptions
from distrib.checkpoint.preemption import RESTART_EXIT_CODE, PreemptionWatcher, exit_for_restart
from distrib.checkpoint.preemption_handler import PreemptionCheckpointHandler, TerminationConfig
from distrib.checkpoint.rng import RNGState
from distrib.checkpoint.files.storage import (AtomicDirectory, CheckpointWarning, CorruptCheckpointError, is_complete,
                                        remove_write_path, verify, worker_write_path, write_path_for)
from distrib.checkpoint.variable import Variable
from distrib.utils.public_names import public_dir

__all__ = [
    "AtomicDirectory", "Checkpoint", "CheckpointLoadStatus", "CheckpointManager", "CheckpointOptions",
    "CheckpointRestoreError",
    "CheckpointSaveError", "CheckpointWarning", "CorruptCheckpointError", "PreemptionCheckpointHandler",
    "PreemptionWatcher", "RESTART_EXIT_CODE", "RNGState", "TerminationConfig", "UnsafeFileError", "Variable",
    "dumps_state", "exit_for_restart", "is_complete", "latest_checkpoint", "load_state", "loads_state",
    "remove_write_path", "save_state", "verify", "worker_write_path", "write_path_for",
]


def __dir__() -> "list[str]":
    return public_dir(globals(), __all__)


