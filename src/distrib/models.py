"""``distrib.models``: load what `distrib.Model.save` wrote (``tf.keras.models`` spelling).

Example:
    >>> model.save("/tmp/keras-model")                       # every worker calls it
    >>> loaded = distrib.models.load_model("/tmp/keras-model")
    >>> loaded.fit(dataset, epochs=2, steps_per_epoch=20)     # continues training exactly

See `distrib.training.saving.model_save` for the directory layout and how the module's
architecture is rebuilt (an importable builder recorded at save time).
"""
from __future__ import annotations

from typing import Any

from distrib.training.model_load import load_model
from distrib.utils.public_names import public_dir

__all__ = ["load_model", "save_model"]


def __dir__() -> "list[str]":
    return public_dir(globals(), __all__)


def save_model(model: Any, filepath: str, overwrite: bool = True, options: Any = None, **kwargs: Any) -> None:
    """``model.save(filepath)`` (Keras's ``tf.keras.models.save_model``)."""
    model.save(filepath, overwrite=overwrite, options=options, **kwargs)
