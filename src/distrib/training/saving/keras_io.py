"""Keras 3 models (torch backend) in `Model.save`, `load_model`, `save_weights` and `load_weights`.

A Keras model is a ``torch.nn.Module`` whose ``state_dict`` keys carry Keras's
process-wide unique layer names (``sequential_1/dense_2/kernel`` when another
model was built first), so keys from one process do not match a model built
in another order. distrib therefore saves a Keras model's variables *by
position* in ``model.weights`` (keys ``keras.00000``, ``keras.00001``, ...),
with their paths kept only for error messages, and rebuilds the architecture
with Keras's own serialisation (``model.to_json()`` and
``keras.saving.deserialize_keras_object`` in safe mode, which creates only
Keras classes and registered ones).

A path ending in ``.keras`` is written and read by Keras itself
(``keras.saving.save_model`` / ``load_model``): a file any Keras program opens.
It holds Keras's compile state, not distrib's: compile the loaded model again.

Example:
    >>> model = distrib.Model(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]))
    >>> sorted(keras_weights(model.module))
    ['keras.00000', 'keras.00001']
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

import torch

from distrib.errors import DistribError, first_line
from distrib.training.errors import SerializationError, WeightsMismatchError
from distrib.utils.optional import keras_layers_class

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["is_keras_model", "keras_weights", "assign_keras_weights", "keras_config", "keras_from_config",
           "import_keras", "KERAS_PREFIX"]

KERAS_PREFIX = "keras."


def is_keras_model(module: Any) -> bool:
    """True for a Keras 3 layer or model (only when ``keras`` is already imported)."""
    layer = keras_layers_class("Layer")
    return layer is not None and isinstance(module, layer)


def import_keras() -> Any:
    """``keras``, imported on the torch backend when the program has not imported it yet."""
    if "keras" not in sys.modules:
        os.environ.setdefault("KERAS_BACKEND", "torch")
    import keras

    if keras.backend.backend() != "torch":
        raise DistribError(f"Keras runs on the {keras.backend.backend()!r} backend; distrib needs "
                           "KERAS_BACKEND=torch (set it before keras is first imported)")
    return keras


def keras_weights(module: Any) -> Dict[str, torch.Tensor]:
    """Every variable of ``module.weights`` by position (``keras.00000`` ...), on the CPU."""
    return {f"{KERAS_PREFIX}{i:05d}": torch.as_tensor(v.value).detach().to("cpu").contiguous().clone()
            for i, v in enumerate(module.weights)}


def is_keras_state(state: Mapping[str, Any]) -> bool:
    return bool(state) and all(k.startswith(KERAS_PREFIX) for k in state)


def assign_keras_weights(module: Any, state: Mapping[str, torch.Tensor], where: str) -> None:
    """Assign positional weights to ``module.weights``; a `WeightsMismatchError` naming the first misfit."""
    variables = list(module.weights)
    keys = sorted(state)
    if not is_keras_state(state):
        raise WeightsMismatchError(f"{where}: the file holds torch state_dict keys, not a Keras model's "
                                   f"weights (keys {keys[:2]}...); save them from a distrib.Model of a Keras model")
    if len(keys) != len(variables):
        raise WeightsMismatchError(f"{where}: the file holds {len(keys)} Keras variables, the model has "
                                   f"{len(variables)}; build the same architecture that saved them")
    bad: List[str] = [f"{v.path} (file {tuple(state[k].shape)}, model {tuple(v.shape)})"
                      for k, v in zip(keys, variables) if tuple(state[k].shape) != tuple(v.shape)]
    if bad:
        raise WeightsMismatchError(f"{where}: shape mismatch {', '.join(bad[:3])}; build the same architecture "
                                   "that saved them")
    with torch.no_grad():
        for k, v in zip(keys, variables):
            v.assign(state[k].to(dtype=torch.as_tensor(v.value).dtype))


def keras_config(module: Any) -> Optional[Dict[str, Any]]:
    """Keras's serialised architecture of ``module``, or None when Keras cannot serialise it."""
    import json

    try:
        return json.loads(module.to_json())
    except Exception:  # noqa: BLE001 - a subclassed model without get_config: Keras raises various errors
        return None


def keras_from_config(config: Dict[str, Any], custom_objects: Optional[Dict[str, Any]], safe_mode: bool,
                      where: str) -> Any:
    """A fresh Keras model from `keras_config`'s output (Keras's safe mode unless ``safe_mode=False``)."""
    keras = import_keras()
    try:
        return keras.saving.deserialize_keras_object(config, custom_objects=custom_objects, safe_mode=safe_mode)
    except Exception as e:  # noqa: BLE001 - Keras reports unknown classes as TypeError/ValueError
        first = first_line(e)
        raise SerializationError(f"{where}: Keras cannot rebuild the saved model ({first[:300]}); register its "
                                 "custom classes with keras.saving.register_keras_serializable or pass "
                                 "custom_objects") from None


def save_keras_file(module: Any, filepath: str, strategy: "Strategy") -> None:
    """``keras.saving.save_model`` to a ``.keras`` file: the chief writes (atomically), all leave together."""
    keras = import_keras()
    if strategy.is_chief:
        directory = os.path.dirname(os.path.abspath(filepath))
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(filepath)}.tmp-{os.getpid()}.keras")
        try:
            keras.saving.save_model(module, tmp)
            os.replace(tmp, filepath)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    if strategy.multi_replica:
        strategy.barrier()


def load_keras_file(filepath: str, custom_objects: Optional[Dict[str, Any]], safe_mode: bool) -> Any:
    """The Keras model of a ``.keras`` file (uncompiled)."""
    keras = import_keras()
    return keras.saving.load_model(filepath, custom_objects=custom_objects, compile=False, safe_mode=safe_mode)
