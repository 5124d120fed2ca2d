"""`Model.save_weights` / `Model.load_weights`: the module's weights alone, as safetensors.

``save_weights(path)`` writes a verified checkpoint directory (committed
atomically, checksummed, the chief's copy only)::

    ckpt_3/
      weights.safetensors   every parameter and buffer of the module, by state_dict key
      MANIFEST.json         sizes and sha256 of the files
      COMPLETE              marker: the save finished

so `distrib.train.latest_checkpoint(dir)` finds the newest complete one
(``ckpt_3`` or ``ckpt-3``). ``load_weights`` reads such a directory or a
plain ``.safetensors`` file (e.g. one written by ``safetensors.torch.save_file``).
The keys are the module's ``state_dict`` keys (a Keras model's variables by
position, see `distrib.training.saving.keras_io`), which do not depend on the
strategy or the number of replicas, so weights saved by 2 workers load into
the same architecture under one process or any other strategy.

Every key must match: a missing, unexpected or differently shaped key is a
`WeightsMismatchError` naming it and the file.

Example:
    >>> model.save_weights("/tmp/ckpts/ckpt_1")            # every worker calls it
    >>> other.load_weights(distrib.train.latest_checkpoint("/tmp/ckpts"))
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Union

import torch

from distrib.checkpoint.files import storage
from distrib.checkpoint.chief_directory import NestedState, PendingDirectory, write_directory
from distrib.checkpoint.files.format import copy_state, load_state
from distrib.checkpoint.files.fs import url_to_fs
from distrib.checkpoint.files.inplace_restore import EXACT_CASTS
from distrib.checkpoint.files.state_file import StateFile, TensorRef
from distrib.checkpoint.strategy_lookup import resolve_role
from distrib.training.errors import WeightsMismatchError

__all__ = ["save_weights", "load_weights", "WeightsMismatchError", "WEIGHTS_NAME",
           "WEIGHTS_FORMAT"]

WEIGHTS_NAME = "weights.safetensors"
WEIGHTS_FORMAT = "distrib.weights"
_MAX_LISTED = 3


def _weights(module: torch.nn.Module) -> Dict[str, torch.Tensor]:
    from distrib.training.saving.keras_io import is_keras_model, keras_weights

    if is_keras_model(module):  # by position: Keras's state_dict keys depend on what was built before
        return keras_weights(module)
    return {k: v.detach() for k, v in module.state_dict().items()}  # the writer copies one tensor at a time


def save_weights(model: Any, filepath: Union[str, Any], overwrite: bool = True,
                 background: bool = False) -> Optional[PendingDirectory]:
    """Implementation of `Model.save_weights` (see the module docstring).

    ``background=True`` copies the weights now and writes the copy on a
    thread; the caller waits for the returned `PendingDirectory` (`ModelCheckpoint` does).

    Steps: 1. role = resolve_role(model.distribute_strategy) (the one lookup);
    2. the weights (copied if ``background``); 3. ``write_directory(..., role=role)``:
    the overwrite check, the write path and the write, all under ``role``.
    """
    role = resolve_role(model.distribute_strategy, "save_weights")
    filepath = str(filepath).rstrip("/")
    weights = _weights(model.module)
    if background:
        weights = copy_state(weights)
    return write_directory(filepath, model.distribute_strategy, {WEIGHTS_NAME: NestedState(weights)},
                           {"kind": WEIGHTS_FORMAT, "name": model.name}, overwrite, who="save_weights",
                           background=background, role=role)


def read_weights(filepath: str) -> Dict[str, torch.Tensor]:
    """The tensors of a `save_weights` directory or a plain safetensors file (verified, never unpickled)."""
    fs, path = url_to_fs(filepath)
    if fs.isdir(path):
        state = storage.read_state_verified(filepath, WEIGHTS_NAME, storage.read_manifest(filepath))
    elif fs.exists(path):
        state = load_state(filepath)
    else:
        raise storage.CheckpointNotFoundError(
            f"load_weights: {filepath} not found; give a directory written by save_weights (e.g. "
            "distrib.train.latest_checkpoint(dir)) or a .safetensors file")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightsMismatchError(f"load_weights: {filepath} holds a full model state, not weights; "
                                   "use distrib.models.load_model for a model.save directory")
    return state


def check_weights(module: torch.nn.Module, state: Mapping[str, torch.Tensor], filepath: str) -> None:
    """Raise `WeightsMismatchError` naming the first disagreeing keys between ``module`` and ``state``."""
    expected = module.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [f"{k} (file {tuple(state[k].shape)}, model {tuple(v.shape)})" for k, v in expected.items()
              if k in state and tuple(state[k].shape) != tuple(v.shape)]
    problems: List[str] = []
    for one, many, keys in (("missing key", "missing keys", missing), ("unexpected key", "unexpected keys", unexpected),
                            ("shape mismatch", "shape mismatches", shapes)):
        if keys:
            more = f" and {len(keys) - _MAX_LISTED} more" if len(keys) > _MAX_LISTED else ""
            problems.append(f"{many if len(keys) > 1 else one} {', '.join(keys[:_MAX_LISTED])}{more}")
    if problems:
        raise WeightsMismatchError(
            f"load_weights({filepath}): the weights do not fit {type(module).__name__}: {'; '.join(problems)}; "
            "build the same architecture that saved them")


def load_weights(model: Any, filepath: Union[str, Any]) -> None:
    """Implementation of `Model.load_weights` (see the module docstring)."""
    if filepath is None:
        raise storage.CheckpointNotFoundError(
            "load_weights(None): no checkpoint given (latest_checkpoint(dir) found none?); check the directory "
            "that ModelCheckpoint / save_weights wrote")
    filepath = str(filepath).rstrip("/")
    from distrib.training.saving.keras_io import assign_keras_weights, is_keras_model, is_keras_state

    if not is_keras_model(model.module):
        _check_declared_weights(model.module, filepath)  # before a byte of a tensor is read
    state = read_weights(filepath)

    if is_keras_model(model.module) and is_keras_state(state):
        assign_keras_weights(model.module, state, f"load_weights({filepath})")
        return
    check_weights(model.module, state, filepath)
    with torch.no_grad():
        model.module.load_state_dict(state, strict=True)


def _check_declared_weights(module: torch.nn.Module, filepath: str) -> None:
    """`check_weights` on what a `save_weights` directory's header declares (shapes, and dtypes that
    `EXACT_CASTS` does not turn exactly into the module's): no tensor is read or allocated first."""
    fs, path = url_to_fs(filepath)
    if not fs.isdir(path):
        return  # a plain .safetensors file: checked once read
    with StateFile(filepath, WEIGHTS_NAME, storage.read_manifest(filepath)) as state_file:
        planned = state_file.plan()
    if not isinstance(planned, dict) or not all(isinstance(v, TensorRef) for v in planned.values()):
        return  # not weights: read_weights names it
    check_weights(module, planned, filepath)
    for key, live in module.state_dict().items():
        saved = planned[key].dtype
        if saved != live.dtype and live.dtype not in EXACT_CASTS.get(saved, ()):
            raise WeightsMismatchError(f"load_weights({filepath}): the weights do not fit {type(module).__name__}: "
                                       f"dtype mismatch {key} (file {saved}, model {live.dtype}); a dtype is "
                                       "never reinterpreted")
