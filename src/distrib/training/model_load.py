"""`load_model`: rebuild, restore and compile a model from the directory `Model.save` wrote.

The directory's layout, and how the architecture is recorded, are described
in `distrib.training.saving.model_save`; the names a file may give are resolved by the
rules of `distrib.training.saving.registry`.

Example:
    >>> model.save("/tmp/keras-model")
    >>> restored = load_model("/tmp/keras-model")
    >>> restored.fit(dataset, epochs=2, steps_per_epoch=20)   # continues exactly
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Optional, Union

import torch

from distrib.checkpoint.files import storage
from distrib.saved_model.options import check_load_options
from distrib.training.model import Model
from distrib.training.saving import keras_io
from distrib.training.saving.architecture import rebuild
from distrib.training.saving.model_save import CONFIG_NAME, FORMAT, STATE_NAME
from distrib.training.saving.registry import resolve_builder
from distrib.training.saving.serialization import SerializationError, from_spec, import_by_path
from distrib.errors import first_line

__all__ = ["load_model"]


def load_model(filepath: Union[str, Any], builder: Union[None, str, Callable[..., Any]] = None,
               compile: bool = True, custom_objects: Optional[Dict[str, Any]] = None,
               safe_mode: bool = True, options: Any = None) -> Any:
    """Rebuild, restore and (by default) compile a model written by `Model.save`.

    Call it inside a strategy's scope to place the model under that strategy
    (every worker loads the chief's copy).

    Args:
        filepath: the directory given to ``save`` (or a ``.keras`` file, read by Keras).
        builder: overrides the recorded builder: an import path or a callable
            returning the module (or a ``distrib.Model``); it gets the recorded
            ``builder_kwargs``. The caller's own argument, so it is trusted.
        compile: compile with the saved configuration and restore the
            optimizer state (default); False gives an uncompiled model.
        custom_objects: ``{name: object}`` for module classes, builders and
            compile objects the file names (by registered name, import path
            or class name).
        safe_mode: True (default): import a module named by the file only if
            its package is already imported (see `distrib.training.saving.registry`);
            also Keras's safe mode for Keras models.
        options: a `distrib.saved_model.LoadOptions` (accepted; see its docs).

    Raises:
        distrib.checkpoint.files.storage.CorruptCheckpointError: incomplete or damaged save.
        distrib.checkpoint.files.format.UnsafeFileError: the state is not safetensors (e.g. a pickle).
        distrib.training.saving.serialization.SerializationError: the module cannot be rebuilt (one line
            naming the class or builder).
    """
    options = check_load_options(options)
    filepath = str(filepath)
    if filepath.endswith(".keras") and os.path.isfile(filepath):
        return Model(keras_io.load_keras_file(filepath, custom_objects, safe_mode))
    manifest = storage.read_manifest(filepath)
    try:
        config = json.loads(storage.read_verified(filepath, CONFIG_NAME, manifest).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SerializationError(f"{filepath}/{CONFIG_NAME} is not valid JSON ({e})") from e
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise SerializationError(f"{filepath} is not a saved distrib model (format "
                                 f"{config.get('format') if isinstance(config, dict) else None!r}); "
                                 "was it written by model.save()?")
    state = storage.read_state_verified(filepath, STATE_NAME, manifest)
    where = f"load_model({filepath})"
    build = _builder(config, builder, filepath, custom_objects, safe_mode)
    built = build(**(config.get("builder_kwargs") or {}))
    module = built.module if isinstance(built, Model) else built
    if not isinstance(module, torch.nn.Module):
        raise SerializationError(f"{where}: the builder returned {type(built).__name__}, "
                                 "not a torch.nn.Module or distrib.Model")
    recorded = config.get("builder")
    model = Model(module, builder=recorded if isinstance(recorded, str) and ":" in recorded else None,
                  builder_kwargs=config.get("builder_kwargs") or {}, name=config.get("name"))
    skip = options is not None and options.experimental_skip_checkpoint
    if not skip:
        _restore_module(module, state["module"], where)
    if compile and config.get("compile") is not None:
        spec = config["compile"]
        args = {k: from_spec(spec.get(k), f"compile({k}=...)", custom_objects) for k in
                ("optimizer", "loss", "metrics", "loss_weights")}
        if args["optimizer"] is None:
            args["optimizer"] = "rmsprop"
        model.compile(**args, jit_compile=spec.get("jit_compile") is True)
        if state.get("optimizer") is not None and not skip:
            model.torch_optimizer.load_state_dict(state["optimizer"])
    model.train_loop_state.global_step = int(config.get("global_step", 0))
    return model


def _restore_module(module: torch.nn.Module, weights: Dict[str, torch.Tensor], where: str) -> None:
    if keras_io.is_keras_model(module) and keras_io.is_keras_state(weights):
        try:
            keras_io.assign_keras_weights(module, weights, where)
        except ValueError as e:
            raise SerializationError(f"{first_line(e)}; check the builder and its arguments") from None
        return
    try:
        module.load_state_dict(weights)
    except RuntimeError as e:
        raise SerializationError(f"{where}: the rebuilt module does not match the saved "
                                 f"weights ({first_line(e)}); check the builder and its arguments") from e


def _builder(config: Dict[str, Any], override: Any, filepath: str, custom_objects: Optional[Dict[str, Any]],
             safe_mode: bool) -> Callable[..., Any]:
    where = f"load_model({filepath})"
    if callable(override):
        return override
    if override is not None:  # the caller's own import path: trusted like any import it writes
        return import_by_path(override, "builder")
    path = config.get("builder")
    if path is None and config.get("keras") is not None:
        return lambda **_: keras_io.keras_from_config(config["keras"], custom_objects, safe_mode, where)
    if path is None and config.get("architecture") is not None:
        return lambda **_: rebuild(config["architecture"], f"{filepath}/{CONFIG_NAME}", custom_objects, safe_mode)
    if path is None:
        raise SerializationError(
            f"{where}: the save records no builder for module class {config.get('module_class')!r} (only "
            "modules made of standard torch.nn layers and registered, importable or __main__ classes are rebuilt "
            "without one); pass load_model(path, builder='pkg.module:function')")
    return resolve_builder(path, custom_objects, safe_mode, where)
