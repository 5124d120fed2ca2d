"""The API reference documents every public name of distrib's packages.

The site is built (``mkdocs build --strict``, once per run: tests/docs_site.py) and its object inventory
(``objects.inv``, which mkdocstrings writes: one entry per rendered object)
is compared with the packages a user imports: ``distrib`` and every module
named in its ``__all__``, and every module named in theirs, recursively.

* Every name in a package's ``__all__`` resolves and is in the reference,
  under the name a user types (``distrib.callbacks.BackupAndRestore``) or
  where it is defined (``distrib.strategies.mirrored.MirroredStrategy``).
* ``dir(package)`` shows nothing public beyond ``__all__`` and the package's
  own submodules: no ``Any``, ``annotations`` or ``json`` that a module
  happened to import.
"""
from __future__ import annotations

import importlib
import importlib.util
import pathlib
import types
import zlib
from typing import Dict, List, Set

import pytest
from docs_site import BuiltSite


needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
    reason="MkDocs is not installed: pip install -c constraints.txt -e '.[docs]' (scripts/env.sh does)")


def read_inventory(path: pathlib.Path) -> Set[str]:
    """The object names of a Sphinx inventory (version 2: four header lines, then zlib-compressed entries)."""
    data = path.read_bytes()
    header, _, body = data.partition(b"\n")
    assert header == b"# Sphinx inventory version 2", header
    for _ in range(3):
        _, _, body = body.partition(b"\n")
    return {line.split(" ", 1)[0] for line in zlib.decompress(body).decode("utf-8").splitlines() if line}


def public_modules() -> Dict[str, types.ModuleType]:
    """``distrib`` and every module reached through ``__all__`` lists, by module name."""
    found: Dict[str, types.ModuleType] = {}
    pending = ["distrib"]
    while pending:
        name = pending.pop(0)
        if name in found:
            continue
        module = importlib.import_module(name)
        found[name] = module
        for public in getattr(module, "__all__", ()):
            value = getattr(module, public)
            if isinstance(value, types.ModuleType):
                pending.append(value.__name__)  # distrib.experimental.coordinator is distrib.coordinator
    return found


def undocumented(inventory: Set[str]) -> List[str]:
    """Public names (``package.name``) the reference does not document."""
    missing = []
    for name, module in public_modules().items():
        for public in module.__all__:
            value = getattr(module, public)
            where = {f"{name}.{public}"}
            if isinstance(value, types.ModuleType):
                where.add(value.__name__)
            elif isinstance(getattr(value, "__module__", None), str) and isinstance(
                    getattr(value, "__qualname__", None), str):
                where.add(f"{value.__module__}.{value.__qualname__}")
            if not where & inventory:
                missing.append(f"{name}.{public}")
    return missing


def stray_names() -> List[str]:
    """Public-looking names ``dir()`` shows that are neither in ``__all__`` nor the package's submodules."""
    stray = []
    for name, module in public_modules().items():
        exported = set(getattr(module, "__all__", ()))
        for attr in dir(module):
            if attr.startswith("_") or attr in exported:
                continue
            value = getattr(module, attr)
            if isinstance(value, types.ModuleType) and value.__name__.startswith(module.__name__ + "."):
                continue  # a submodule of its own, e.g. distrib.callbacks.csv_logger
            stray.append(f"{name}.{attr}")
    return stray


@pytest.fixture(scope="module")
def inventory(docs_site: BuiltSite) -> Set[str]:
    assert docs_site.returncode == 0, f"mkdocs build --strict failed:\n{docs_site.stderr[-6000:]}"
    return read_inventory(docs_site.site / "objects.inv")


@needs_mkdocs
def test_every_public_name_is_in_the_api_reference(inventory: Set[str]) -> None:
    modules = public_modules()
    # the packages of docs/api/index.md's table, and the modules reached from them
    assert {"distrib.callbacks", "distrib.data.experimental", "distrib.optimizers.schedules"} <= set(modules)
    assert sum(len(m.__all__) for m in modules.values()) > 300
    missing = undocumented(inventory)
    assert not missing, (f"{len(missing)} public name(s) are missing from the API reference (docs/api/): "
                         f"{missing}; add the package or the object to its page")


@needs_mkdocs
def test_checkpoint_callbacks_are_on_the_callbacks_page(inventory: Set[str]) -> None:
    import distrib.callbacks

    assert {"BackupAndRestore", "ModelCheckpoint"} <= set(distrib.callbacks.__all__)
    assert {"distrib.callbacks.backup_and_restore.BackupAndRestore",
            "distrib.callbacks.model_checkpoint.ModelCheckpoint"} <= inventory


def test_dir_shows_only_the_public_names() -> None:
    import distrib

    assert not {"Any", "Optional", "annotations", "importlib"} & set(dir(distrib))
    assert "__version__" in dir(distrib) and "MirroredStrategy" in dir(distrib)
    stray = stray_names()
    assert not stray, (f"dir() shows names that are not in the package's __all__: {stray}; "
                       "add them to __all__ (and the reference) or keep them out of dir()")
