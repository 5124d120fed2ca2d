"""`load_checkpoint`: TF's ``tf.train.load_checkpoint`` reader over a distrib checkpoint.

A checkpoint's state is a nesting of dicts and lists; the reader names every
tensor, array and number in it by its path, joined with ``/``
(``model/0.weight``, ``optimizer/state/0/exp_avg``, a `Variable`'s
``step/value``, ``save_counter/value``). The
file is untrusted: it is verified against its manifest first, and a key that
is not a plain name (a ``/`` or a control character in it, a type other than
str or int) or two keys giving one name make one `CorruptCheckpointError`
naming the checkpoint and the key.

Example:
    >>> reader = distrib.train.load_checkpoint(manager.latest_checkpoint)   # or the directory
    >>> reader.get_variable_to_shape_map()["model/0.weight"]
    [10, 4]
    >>> reader.get_tensor("model/0.weight").dtype
    dtype('float32')
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import torch

from distrib.checkpoint.files import storage
from distrib.checkpoint.checkpoint import STATE_FILE
from distrib.checkpoint.discovery import first_valid, numbered_checkpoints
from distrib.checkpoint.errors import CheckpointNotFoundError, CorruptCheckpointError
from distrib.checkpoint.files.fs import url_to_fs
from distrib.checkpoint.files.state_file import read_state_verified

__all__ = ["CheckpointReader", "load_checkpoint"]


def _plain_key(path: str, key: Any) -> str:
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise CorruptCheckpointError(f"{path}: the state has a key of type {type(key).__name__} ({key!r:.60}); "
                                     "not a distrib checkpoint's")
    text = str(key)
    if not text or "/" in text or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise CorruptCheckpointError(f"{path}: the state has the key {text!r:.80}, which is not a plain name")
    return text


def _flatten(path: str, value: Any, prefix: str, out: Dict[str, torch.Tensor]) -> None:
    if isinstance(value, dict):
        items = [(_plain_key(path, k), v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        if isinstance(value, torch.Tensor):
            out[prefix] = value
        elif isinstance(value, np.ndarray):
            out[prefix] = torch.from_numpy(value)
        elif isinstance(value, (bool, int, float)):
            out[prefix] = torch.tensor(value)
        return  # strings and None are no variables
    for key, item in items:
        name = f"{prefix}/{key}" if prefix else key
        if name in out:
            raise CorruptCheckpointError(f"{path}: two entries of the state are named {name!r}")
        _flatten(path, item, name, out)


class CheckpointReader:
    """The variables of one checkpoint by name (see the module docstring).

    Args:
        path: a checkpoint written by `Checkpoint.save` / `CheckpointManager.save`.
    """

    def __init__(self, path: str) -> None:
        self.path = str(path).rstrip("/")
        manifest = storage.read_manifest(self.path)
        if STATE_FILE not in manifest["files"]:
            raise CorruptCheckpointError(f"{self.path}: no {STATE_FILE} in the checkpoint (files: "
                                         f"{', '.join(sorted(manifest['files']))[:200]})")
        state = read_state_verified(self.path, STATE_FILE, manifest)
        self._tensors: Dict[str, torch.Tensor] = {}
        _flatten(self.path, state, "", self._tensors)

    def get_variable_to_shape_map(self) -> Dict[str, List[int]]:
        """``{name: shape}`` of every variable (a scalar's shape is ``[]``)."""
        return {name: list(t.shape) for name, t in self._tensors.items()}

    def get_variable_to_dtype_map(self) -> Dict[str, torch.dtype]:
        """``{name: torch dtype}`` of every variable."""
        return {name: t.dtype for name, t in self._tensors.items()}

    def has_tensor(self, name: str) -> bool:
        return name in self._tensors

    def get_tensor(self, name: str) -> Any:
        """The value of ``name`` as a numpy array (a torch tensor for a dtype numpy lacks, e.g. bfloat16).

        Raises:
            KeyError: no variable has that name (the message lists a few that do).
        """
        if name not in self._tensors:
            known = ", ".join(sorted(self._tensors)[:8])
            raise KeyError(f"{self.path}: no variable {name!r} in the checkpoint (it has {known}...)")
        tensor = self._tensors[name].detach().cpu()
        try:
            return tensor.numpy().copy()
        except TypeError:
            return tensor.clone()


def load_checkpoint(ckpt_dir_or_file: str) -> CheckpointReader:
    """A `CheckpointReader` for a checkpoint, or for the latest one in a directory (TF's ``load_checkpoint``).

    A local read: no collective, whichever task calls it.

    Raises:
        CheckpointNotFoundError: the directory holds no usable checkpoint.
        CorruptCheckpointError: the checkpoint is damaged or not distrib's.
    """
    path = str(ckpt_dir_or_file).rstrip("/")
    fs, local = url_to_fs(path)
    if fs.isdir(local) and not fs.exists(f"{local}/{storage.MARKER_NAME}"):
        latest = first_valid([p for _, p in reversed(numbered_checkpoints(path))])
        if latest is None:
            raise CheckpointNotFoundError(f"{path}: no checkpoint in this directory")
        path = latest
    return CheckpointReader(path)
