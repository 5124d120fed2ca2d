"""`Model.save`: a directory that rebuilds a compiled, trainable model (`distrib.training.model_load` reads it back).

Layout (a verified checkpoint directory, committed atomically)::

    my_model/
      model.json           format, how to rebuild the module, compile config (JSON)
      state.safetensors    module weights and buffers, optimizer state (no pickle)
      MANIFEST.json        sizes and sha256 of the files
      COMPLETE             marker: the save finished

How the architecture is recovered (weights alone cannot rebuild a ``torch.nn.Module``):

* ``distrib.Model(module, builder="pkg.models:build_cnn", builder_kwargs={"width": 64})``
  records that builder; loading calls ``build_cnn(width=64)`` if the loading
  program allows it (a registered function, ``custom_objects``, or a module
  class: see `distrib.training.saving.registry` for the trust model). It may return
  a module or a ``distrib.Model``.
* A Keras 3 model is recorded with Keras's own serialisation and its
  variables by position (`distrib.training.saving.keras_io`), so it loads back even
  after other Keras models were built; a path ending in ``.keras`` is written
  by Keras itself (a torch module saved to such a path gets the directory format).
* Otherwise the module tree is described as JSON (`distrib.training.saving.architecture`):
  standard ``torch.nn`` layers by their arguments; the user's own module
  classes by their registered name (`distrib.saving.register_serializable`),
  import path, or ``__main__`` name, and their ``get_config()``.
* A module that cannot be described (a class defined inside a function)
  still has its weights saved, with a warning; ``load_model(path, builder=...)``
  must be told how to build it.

Nothing is unpickled, and only ``torch.nn.Module`` subclasses (or builders the
loading program registered or passed) are ever constructed from a file's names.

Multi-worker: every worker calls ``save`` (as in TensorFlow's multi-worker Keras
tutorial); the chief writes ``path``, the other workers write the same bytes to
private temporary directories that are removed before ``save`` returns, and all
workers leave ``save`` together, so ``path`` is complete on every worker afterwards.

Example:
    >>> model.save("/tmp/keras-model")
    >>> restored = distrib.models.load_model("/tmp/keras-model")
    >>> restored.fit(dataset, epochs=2, steps_per_epoch=20)   # continues exactly
"""
from __future__ import annotations

import inspect
import json
import warnings
from typing import Any, Dict, Optional, Union

import torch

from distrib.checkpoint.chief_directory import NestedState, PendingDirectory, check_overwrite, write_directory
from distrib.checkpoint.files.format import copy_state
from distrib.checkpoint.strategy_lookup import resolve_role
from distrib.training.saving import keras_io
from distrib.training.saving.architecture import describe
from distrib.training.saving.keras_config import get_config_of
from distrib.training.saving.serialization import importable_path

__all__ = ["save_model", "CONFIG_NAME", "STATE_NAME", "FORMAT"]

FORMAT = "distrib.model"
FORMAT_VERSION = 1
CONFIG_NAME = "model.json"
STATE_NAME = "state.safetensors"


def _infer_builder(module: torch.nn.Module) -> Optional[str]:
    """An importable module class constructible without arguments (recorded as the builder)."""
    cls = type(module)
    if cls.__module__.startswith("torch.") or keras_io.is_keras_model(module):
        return None
    path = importable_path(cls)
    if path is None or get_config_of(module) is not None:
        return None
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    required = [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                                          p.KEYWORD_ONLY)]
    return None if required else path


def model_config(model: Any) -> Dict[str, Any]:
    """The JSON description of ``model`` written to ``model.json``."""
    import distrib

    module = model.module
    keras = keras_io.is_keras_model(module)
    builder = model.builder or _infer_builder(module)
    keras_arch = keras_io.keras_config(module) if keras and builder is None else None
    architecture = describe(module) if builder is None and not keras else None
    if builder is None and architecture is None and keras_arch is None:
        warnings.warn(
            f"saving {model.name}: its {'Keras model cannot be serialised by Keras (get_config)' if keras else 'architecture cannot be described'}"
            f", so there is no importable builder: load_model will need load_model(path, builder=...); "
            f"register the module class (distrib.saving.register_serializable) or pass "
            f"distrib.Model(module, builder='pkg.module:function')", stacklevel=4)
    elif architecture is not None and "<locals>" in json.dumps(architecture):
        warnings.warn(f"saving {model.name}: a module class is defined inside a function, so load_model will need "
                      "custom_objects={'ClassName': ClassName} (or builder=); define it at module level or register "
                      "it (distrib.saving.register_serializable)", stacklevel=4)
    elif builder is not None and builder.startswith("__main__:"):
        warnings.warn(f"saving {model.name}: builder {builder!r} is defined in the script being run, so only "
                      "that script can load this model; move it to an importable module", stacklevel=4)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "distrib_version": getattr(distrib, "__version__", "unknown"),
        "torch_version": torch.__version__,
        "name": model.name,
        "builder": builder,
        "builder_kwargs": model.builder_kwargs,
        "architecture": architecture,
        "keras": keras_arch,
        "module_class": importable_path(type(module)) or type(module).__qualname__,
        "compile": model.get_compile_config(),
        "global_step": int(model.train_loop_state.global_step),
    }


def module_weights(module: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """What is saved of a module: its state_dict, or a Keras model's variables by position."""
    if keras_io.is_keras_model(module):
        return keras_io.keras_weights(module)
    return module.state_dict()


def save_model(model: Any, filepath: Union[str, Any], overwrite: bool = True, include_optimizer: bool = True,
               background: bool = False) -> Optional[PendingDirectory]:
    """Implementation of `Model.save` (see the module docstring).

    ``background=True`` (distrib's directory format only) copies the state now
    and writes it on a thread; the caller waits for the returned `PendingDirectory`.
    """
    filepath = str(filepath)
    strategy = model.distribute_strategy
    role = resolve_role(strategy, "model.save")  # the one lookup; passed down
    if filepath.endswith(".keras") and keras_io.is_keras_model(model.module):
        # A torch module saved to a ".keras" path (the format TF's Keras tutorial recommends) gets
        # distrib's directory format.
        if not overwrite:
            check_overwrite(filepath, role, "model.save")
        keras_io.save_keras_file(model.module, filepath, strategy)
        return None
    config = model_config(model)  # raises (on every worker alike) if the compile config cannot be saved
    optimizer = model.torch_optimizer if include_optimizer else None
    state = {"module": module_weights(model.module),
             "optimizer": None if optimizer is None else optimizer.state_dict()}
    config_bytes = json.dumps(config, indent=1, sort_keys=True).encode()
    if background:
        state = copy_state(state)
    return write_directory(filepath, strategy, {CONFIG_NAME: config_bytes, STATE_NAME: NestedState(state)},
                           {"kind": FORMAT, "name": model.name}, overwrite, who="model.save", background=background,
                           role=role)
