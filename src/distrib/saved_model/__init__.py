"""``distrib.saved_model``: export a model for inference and load it without the training code.

The role of TF's SavedModel (``tf.saved_model.save`` / ``tf.saved_model.load``),
built on ``torch.export`` (see docs/saving.md). Who owns what:

* `export`: `save` (trace, verify, write the directory) and `load` (a `LoadedModel`).
* `program_check`: the traced graph is checked before it is rebuilt (ATen operators only).
* `options`: `SaveOptions`, `LoadOptions`; `artifact`: the exported directory's files.

Example:
    >>> distrib.saved_model.save(model, "/tmp/export",
    ...     input_signature=[distrib.TensorSpec(shape=(None, 1, 28, 28), dtype=torch.float32)])
    >>> distrib.saved_model.load("/tmp/export").signatures["serving_default"](images)["output_0"].shape
    torch.Size([7, 10])
"""
from __future__ import annotations

from distrib.data.structure import TensorSpec
from distrib.saved_model.export import DEFAULT_SERVING_SIGNATURE_DEF_KEY, ExportError, LoadedModel, load, save
from distrib.saved_model.options import LoadOptions, SaveOptions
from distrib.saved_model.program_check import UnsafeProgramError
from distrib.utils.public_names import public_dir

__all__ = ["save", "load", "LoadedModel", "ExportError", "UnsafeProgramError", "TensorSpec", "SaveOptions",
           "LoadOptions",
           "DEFAULT_SERVING_SIGNATURE_DEF_KEY"]


def __dir__() -> "list[str]":
    return public_dir(globals(), __all__)
