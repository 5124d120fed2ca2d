"""`Model.save` and `load_model`: a directory that rebuilds a compiled, trainable model.

Layout (a verified checkpoint directory, committed atomically)::

    my_model/
      model.json           format, how to rebuild the module, compile config (JSON)
      state.safetensors    module weights and buffers, optimizer state (no pickle)
      MANIFEST.json        sizes and sha256 of the files
      COMPLETE             marker: the save finished

How the architecture is recovered: weights alone cannot rebuild a
``torch.nn.Module``, so the save records an *importable builder*:

* ``distrib.Model(module, builder="pkg.models:build_cnn", builder_kwargs={"width": 64})``
  records that function; loading imports ``pkg.models`` and calls
  ``build_cnn(width=64)``. The function may return a module or a
  ``distrib.Model`` (such as the seeds' ``build_and_compile_cnn_model``).
* Without ``builder``, a module whose class is importable (not defined in a
  function) and constructible with no arguments is recorded by its class.
* Without ``builder``, a module made only of standard ``torch.nn`` layers
  (``Sequential``/``ModuleList``/``ModuleDict`` of ``Linear``, ``Conv2d``,
  ``ReLU``, ...) is recorded as a JSON description of the layer tree with
  each layer's constructor arguments (`distrib.training.architecture`);
  loading creates only ``torch.nn`` classes from it.
* Otherwise the save still writes the weights, warns, and
  ``load_model(path, builder=...)`` must be told how to build the module.

Loading imports only that recorded function or class (and, for the compile
configuration, distrib's own loss/metric/optimizer classes or importable
functions); it never unpickles anything, and refuses files that are not
safetensors.

Multi-worker: every worker calls ``save`` (as in the seeds); the chief writes
``path``, the other workers write the same bytes to private temporary
directories that are removed before ``save`` returns, and all workers leave
``save`` together, so ``path`` is complete on every worker afterwards.

Example:
    >>> model.save("/tmp/keras-model")
    >>> restored = distrib.models.load_model("/tmp/keras-model")
    >>> restored.fit(dataset, epochs=2, steps_per_epoch=20)   # continues exactly
"""
from __future__ import annotations

import inspect
import json
import warnings
from typing import Any, Callable, Dict, Optional, Union

import torch

from distrib.checkpoint import storage
from distrib.checkpoint.format import dumps_state, loads_state
from distrib.training.architecture import describe, rebuild
from distrib.training.serialization import SerializationError, from_spec, import_by_path, importable_path
from distrib.checkpoint.chief_directory import write_directory

__all__ = ["save_model", "load_model", "CONFIG_NAME", "STATE_NAME", "FORMAT"]

FORMAT = "distrib.model"
FORMAT_VERSION = 1
CONFIG_NAME = "model.json"
STATE_NAME = "state.safetensors"


def _infer_builder(module: torch.nn.Module) -> Optional[str]:
    cls = type(module)
    if cls.__module__.startswith("torch."):
        return None
    path = importable_path(cls)
    if path is None:
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

    builder = model.builder or _infer_builder(model.module)
    architecture = describe(model.module) if builder is None else None
    if builder is None and architecture is None:
        warnings.warn(
            f"saving {model.name}: no importable builder is known, so load_model will need "
            f"load_model(path, builder=...); pass distrib.Model(module, builder='pkg.module:function') "
            "to record one", stacklevel=4)
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
        "module_class": importable_path(type(model.module)) or type(model.module).__qualname__,
        "compile": model.get_compile_config(),
        "global_step": int(model.train_loop_state.global_step),
    }


def save_model(model: Any, filepath: Union[str, Any], overwrite: bool = True) -> None:
    """Implementation of `Model.save` (see the module docstring)."""
    filepath = str(filepath)
    strategy = model.distribute_strategy
    config = model_config(model)  # raises (on every worker alike) if the compile config cannot be saved
    state = {"module": model.module.state_dict(),
             "optimizer": None if model.torch_optimizer is None else model.torch_optimizer.state_dict()}
    config_bytes = json.dumps(config, indent=1, sort_keys=True).encode()
    state_bytes = dumps_state(state)
    write_directory(filepath, strategy, {CONFIG_NAME: config_bytes, STATE_NAME: state_bytes},
                    {"kind": FORMAT, "name": model.name}, overwrite, who="model.save")


def load_model(filepath: Union[str, Any], builder: Union[None, str, Callable[..., Any]] = None,
               compile: bool = True, custom_objects: Optional[Dict[str, Any]] = None) -> Any:
    """Rebuild, restore and (by default) compile a model written by `Model.save`.

    Call it inside a strategy's scope to place the model under that strategy
    (every worker loads the chief's copy).

    Args:
        filepath: the directory given to ``save``.
        builder: overrides the recorded builder: an import path or a callable
            returning the module (or a ``distrib.Model``); it gets the recorded
            ``builder_kwargs``.
        compile: compile with the saved configuration and restore the
            optimizer state (default); False gives an uncompiled model.
        custom_objects: ``{name: object}`` replacing names and import paths
            in the saved compile configuration.

    Raises:
        distrib.checkpoint.storage.CorruptCheckpointError: incomplete or damaged save.
        distrib.checkpoint.format.UnsafeFileError: the state is not safetensors (e.g. a pickle).
        distrib.training.serialization.SerializationError: the builder cannot be found.
    """
    from distrib.training.model import Model

    filepath = str(filepath)
    manifest = storage.read_manifest(filepath)
    try:
        config = json.loads(storage.read_verified(filepath, CONFIG_NAME, manifest).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SerializationError(f"{filepath}/{CONFIG_NAME} is not valid JSON ({e})") from e
    if config.get("format") != FORMAT:
        raise SerializationError(f"{filepath} is not a saved distrib model (format {config.get('format')!r}); "
                                 "was it written by model.save()?")
    state = loads_state(storage.read_verified(filepath, STATE_NAME, manifest), name=f"{filepath}/{STATE_NAME}")
    build = _builder(config, builder, filepath)
    built = build(**(config.get("builder_kwargs") or {}))
    module = built.module if isinstance(built, Model) else built
    if not isinstance(module, torch.nn.Module):
        raise SerializationError(f"load_model({filepath}): the builder returned {type(built).__name__}, "
                                 "not a torch.nn.Module or distrib.Model")
    recorded = config.get("builder")
    model = Model(module, builder=recorded if isinstance(recorded, str) and ":" in recorded else None,
                  builder_kwargs=config.get("builder_kwargs") or {}, name=config.get("name"))
    try:
        module.load_state_dict(state["module"])
    except RuntimeError as e:
        raise SerializationError(f"load_model({filepath}): the rebuilt module does not match the saved "
                                 f"weights ({str(e).splitlines()[0]}); check the builder and its arguments") from e
    if compile and config.get("compile") is not None:
        spec = config["compile"]
        args = {k: from_spec(spec.get(k), f"compile({k}=...)", custom_objects) for k in
                ("optimizer", "loss", "metrics", "loss_weights")}
        if args["optimizer"] is None:
            args["optimizer"] = "rmsprop"
        model.compile(**args)
        if state.get("optimizer") is not None:
            model.torch_optimizer.load_state_dict(state["optimizer"])
    model.train_loop_state.global_step = int(config.get("global_step", 0))
    return model


def _builder(config: Dict[str, Any], override: Any, filepath: str) -> Callable[..., Any]:
    if callable(override):
        return override
    path = override if override is not None else config.get("builder")
    if path is None and config.get("architecture") is not None:
        return lambda **_: rebuild(config["architecture"], f"{filepath}/{CONFIG_NAME}")
    if path is None:
        raise SerializationError(
            f"load_model({filepath}): the save records no builder for module class "
            f"{config.get('module_class')!r} (only modules made of standard torch.nn layers are rebuilt "
            "without one); pass load_model(path, builder='pkg.module:function')")
    return import_by_path(path, "builder")
