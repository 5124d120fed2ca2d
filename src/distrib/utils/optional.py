"""Optional dependencies: import one, or fail in one line that names the extra to install.

distrib's core needs only torch and a few small packages; a feature that needs
more names the package to install and its extra (``pyproject.toml``'s
``[project.optional-dependencies]``; distrib is not on a package index, so the
extras install from a clone: ``pip install -c constraints.txt ".[datasets]"``):

===============  ====================  ==============================================
extra            installs              needed by
===============  ====================  ==============================================
``datasets``     scikit-learn          ``distrib.datasets.mnist`` (the offline digits)
``plot``         matplotlib            ``distrib plot`` / `distrib.plot`
``tensorboard``  tensorboard           the ``TensorBoard`` callback, reading its logs
===============  ====================  ==============================================

Example:
    >>> require("json", extra="datasets", purpose="a test").__name__
    'json'
    >>> try:
    ...     require("no_such_module_xyz", extra="datasets", purpose="distrib.datasets.mnist")
    ... except MissingDependencyError as error:
    ...     print(error)
    distrib.datasets.mnist needs scikit-learn, which is not installed: pip install scikit-learn (distrib's 'datasets' extra)
"""
from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any, Dict, Optional

from distrib.errors import DistribError

__all__ = ["MissingDependencyError", "require", "EXTRAS", "keras_layers_class"]

#: The packages each extra installs, as the one-line error names them.
EXTRAS: Dict[str, str] = {
    "datasets": "scikit-learn",
    "plot": "matplotlib",
    "tensorboard": "tensorboard",
}


class MissingDependencyError(DistribError, ImportError):
    """A feature's optional dependency is not installed; the message names the extra."""


def require(module: str, *, extra: str, purpose: str) -> ModuleType:
    """Import ``module``, or raise `MissingDependencyError` naming ``extra`` for ``purpose``.

    Only a missing module becomes the one-line error; an installed package
    that fails while importing keeps its own error (that is a different bug).
    """
    if extra not in EXTRAS:
        raise ValueError(f"require: unknown extra {extra!r}; known: {sorted(EXTRAS)}")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        raise MissingDependencyError(
            f"{purpose} needs {EXTRAS[extra]}, which is not installed: "
            f"pip install {EXTRAS[extra]} (distrib's {extra!r} extra)") from None


def keras_layers_class(name: str) -> Optional[Any]:
    """``keras.layers.<name>`` when the program already imported ``keras`` (distrib never imports it for
    a type check), else None."""
    keras = sys.modules.get("keras")
    return getattr(getattr(keras, "layers", None), name, None)  # keras is optional and may be a partial or stubbed module
