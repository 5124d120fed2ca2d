"""What the side-car evaluator reads from a checkpoint directory, whoever wrote it.

* `CheckpointManager` / `Checkpoint.save` (``ckpt-<N>``; ``state.safetensors``):
  the model tracked under ``model_key`` (its ``module`` entry for a
  `distrib.Model`);
* `ModelCheckpoint` with ``save_weights_only=True`` (``weights.safetensors``,
  `Model.save_weights`) and without (``model.json`` + ``state.safetensors``,
  `Model.save`): the module's weights;
* `BackupAndRestore` (``backup-<N>``, a `Checkpoint` of the model).

`unusable_entries` names what the directory holds that is none of these, so
the evaluator can say so instead of waiting silently.

Example:
    >>> unusable_entries("/ckpts", "ckpt", "/ckpts/eval")       # ckpt-1/, ckpt-1.index (TF's), eval/
    ['ckpt-1.index']
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import torch

from distrib.checkpoint.files import storage
from distrib.checkpoint.checkpoint import STATE_FILE
from distrib.checkpoint.discovery import numbered_checkpoints
from distrib.checkpoint.manager import INDEX_FILE, PEER_SNAPSHOT
from distrib.training.saving.model_save import CONFIG_NAME
from distrib.training.saving.weights import WEIGHTS_NAME

__all__ = ["BACKUP_PREFIX", "NotAModelCheckpoint", "model_weights", "unusable_entries"]

BACKUP_PREFIX = "backup"  # BackupAndRestore's checkpoint name


class NotAModelCheckpoint(Exception):
    """A complete checkpoint that holds no weights the evaluator can load (the message says what it holds).

    ``fatal``: the evaluator's own settings are wrong (every checkpoint would fail alike).
    """

    def __init__(self, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


def model_weights(path: str, manifest: Mapping[str, Any], model_key: str) -> Dict[str, Any]:
    """The module weights (``state_dict`` keys) in the verified checkpoint ``path``.

    Raises:
        NotAModelCheckpoint: it is complete but holds no model weights.
    """
    files = manifest["files"]
    if WEIGHTS_NAME in files:
        return _tensors(storage.read_state_verified(path, WEIGHTS_NAME, manifest), path)
    if STATE_FILE not in files:
        raise NotAModelCheckpoint(f"it holds {', '.join(sorted(files))[:120]}, no model weights")
    state = storage.read_state_verified(path, STATE_FILE, manifest)
    if CONFIG_NAME in files:  # Model.save
        return _tensors(state.get("module") if isinstance(state, dict) else None, path)
    if not isinstance(state, dict) or model_key not in state:
        keys = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
        raise NotAModelCheckpoint(f"checkpoint tracks no {model_key!r} (it has {keys}); save the model as "
                                  f"Checkpoint({model_key}=model) or pass SidecarEvaluator(model_key=...)", fatal=True)
    entry = state[model_key]
    return entry["module"] if isinstance(entry, dict) and isinstance(entry.get("module"), dict) else entry


def _tensors(state: Any, path: str) -> Dict[str, torch.Tensor]:
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise NotAModelCheckpoint("its weights are not a flat table of tensors")
    return state


def unusable_entries(directory: str, prefix: Optional[str], eval_dir: str) -> List[str]:
    """Entries of ``directory`` that are no ``<prefix>-<N>`` (or ``backup-<N>``) checkpoint.

    Hidden names (writes in flight), `CheckpointManager`'s own files and the
    evaluator's ``eval_dir`` are not listed.
    """
    usable = {p.rstrip("/").rsplit("/", 1)[-1] for _, p in numbered_checkpoints(directory, prefix)}
    if prefix == "ckpt":
        usable |= {p.rstrip("/").rsplit("/", 1)[-1] for _, p in numbered_checkpoints(directory, BACKUP_PREFIX)}
    own = str(eval_dir).rstrip("/").rsplit("/", 1)[-1] if str(eval_dir).rstrip("/").rsplit("/", 1)[0] == \
        str(directory).rstrip("/") else None
    known = usable | {INDEX_FILE, PEER_SNAPSHOT, own}
    return [n for n in storage.list_names(directory) if not n.startswith(".") and n not in known]
