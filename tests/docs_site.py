"""One strict build of the documentation site per test run, shared by the tests that read it.

``mkdocs build --strict`` takes tens of seconds (it renders the API reference
from every docstring); test_docs.py checks the build and its pages,
test_api_reference.py reads its object inventory. The first test that asks
builds the site under the run's temporary directory, the pytest processes of
one ``-n`` run included (a file lock: the others wait and read the same
build), and records the build's exit status and messages beside it; each test
asserts on that record itself, so none depends on which one came first.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
from typing import Dict

from filelock import FileLock

__all__ = ["BuiltSite", "build_once", "clean_env", "shared_tmp_of_the_run", "BUILD_TIMEOUT_S"]

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD_TIMEOUT_S = 240
# Environment that would turn a standalone example into a cluster task.
_CLUSTER_ENV = ("TF_CONFIG", "DISTRIB_LOCAL_DEVICES", "DISTRIB_LOCAL_REPLICA", "RANK", "WORLD_SIZE",
                "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT")


def clean_env() -> Dict[str, str]:
    """This process's environment without cluster variables, this checkout's distrib importable.

    Where nothing else changes, it is the environment of the test harness's tasks
    (``OMP_NUM_THREADS=1`` where unset), so the pages' examples fork from the same
    preloaded server as they do (`distrib.testing.run_python`).
    """
    import distrib

    env = {k: v for k, v in os.environ.items() if k not in _CLUSTER_ENV and not k.startswith("SLURM_")}
    if pathlib.Path(distrib.__file__).resolve().parents[1] != ROOT / "src":  # another checkout's install
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", "1")  # small examples; the machine runs other tests too
    return env


@dataclasses.dataclass(frozen=True)
class BuiltSite:
    """A finished ``mkdocs build --strict``: where the site is, its exit status and its messages."""

    site: pathlib.Path
    returncode: int
    stderr: str


def build_once(shared_tmp: pathlib.Path) -> BuiltSite:
    """The site built under ``shared_tmp`` (a directory every process of the run shares), built now if not yet.

    Example:
        >>> built = build_once(tmp_path_factory.getbasetemp())  # doctest: +SKIP
        >>> built.returncode, (built.site / "index.html").is_file()               # doctest: +SKIP
        (0, True)
    """
    where = shared_tmp / "docs-site"
    record = where / "build.json"
    with FileLock(str(where) + ".lock"):
        if not record.is_file():
            where.mkdir(parents=True, exist_ok=True)
            result = subprocess.run(
                [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                 "--site-dir", str(where / "site")],
                cwd=ROOT, env=dict(clean_env(), NO_MKDOCS_2_WARNING="1"), capture_output=True, text=True,
                timeout=BUILD_TIMEOUT_S)
            record.write_text(json.dumps({"returncode": result.returncode, "stderr": result.stderr}),
                              encoding="utf-8")
        built = json.loads(record.read_text(encoding="utf-8"))
    return BuiltSite(where / "site", built["returncode"], built["stderr"])


def shared_tmp_of_the_run(basetemp: pathlib.Path, xdist_worker: bool) -> pathlib.Path:
    """The temporary directory all pytest processes of this run share (xdist gives each worker its own below it)."""
    return basetemp.parent if xdist_worker else basetemp
