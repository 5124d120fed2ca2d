"""Local replicas start however the program was started, whatever its working directory.

``MirroredStrategy(["cpu:0", "cpu:1"])`` re-runs the program for replica 1
(`distrib.process.rerun`). Each start form below must reach replica 1 —
proved by a cross-replica sum (1 + 2 = 3) that needs both processes — and
run it in the same directory as replica 0. Forms that cannot be re-run stop
with one error line naming the way out.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(180)

PROGRAM = textwrap.dedent("""
    import json, os, sys
    os.chdir("work")                                  # before importing distrib, relative
    import torch, distrib
    strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    total = strategy.reduce("SUM", strategy.run(lambda: torch.tensor(1.0 + strategy.replica_id)), axis=None)
    with open(f"out.{strategy.replica_id}.json", "w") as f:
        json.dump({"total": total.item(), "cwd": os.getcwd(), "args": sys.argv[1:]}, f)
""")


# python -c: Python records no starting directory, so the code changes directory after importing distrib
CODE = PROGRAM.replace('os.chdir("work")                                  # before importing distrib, relative\n'
                       "import torch, distrib\n", 'import torch, distrib\nos.chdir("work")\n')
assert CODE != PROGRAM


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "DISTRIB_LOCAL_DEVICES")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _layout(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "train.py").write_text(PROGRAM)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(PROGRAM)


def _check_both_replicas(tmp_path, args):
    for replica in (0, 1):
        result = json.loads((tmp_path / "work" / f"out.{replica}.json").read_text())
        assert result == {"total": 3.0, "cwd": str(tmp_path / "work"), "args": args}, replica


FORMS = {
    "relative script, chdir before import": (["jobs/train.py", "--flag", "x"], ["--flag", "x"]),
    "python -m module, chdir before import": (["-m", "pkg.train", "y"], ["y"]),
    "interpreter options kept": (["-u", "-X", "utf8", "./jobs/../jobs/train.py"], []),
    "python -c code": (["-c", CODE, "z"], ["z"]),
}


@pytest.mark.parametrize("form", [pytest.param(f, marks=() if i < 1 else pytest.mark.slow)
                                  for i, f in enumerate(FORMS)])
def test_replica_1_starts(form, tmp_path):
    _layout(tmp_path)
    argv, args = FORMS[form]
    proc = subprocess.run([sys.executable, *argv], cwd=tmp_path, text=True, capture_output=True,
                          timeout=150, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_both_replicas(tmp_path, args)


def _one_error_line(proc, words):
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]
    for word in words:
        assert word in lines[0], lines[0]


def test_standard_input_is_one_clear_error_line(tmp_path):
    _layout(tmp_path)
    proc = subprocess.run([sys.executable, "-"], input=PROGRAM, cwd=tmp_path, text=True, capture_output=True,
                          timeout=150, env=_env())
    _one_error_line(proc, ["2 local replicas", "interactive session or standard input", "python script.py"])


@pytest.mark.slow
def test_notebook_is_one_clear_error_line(tmp_path):
    _layout(tmp_path)
    notebook = "import sys, types\nsys.modules['ipykernel'] = types.ModuleType('ipykernel')\n" + PROGRAM
    (tmp_path / "kernel.py").write_text(notebook)
    proc = subprocess.run([sys.executable, "kernel.py"], cwd=tmp_path, text=True, capture_output=True,
                          timeout=150, env=_env())
    _one_error_line(proc, ["2 local replicas", "notebook", "distrib launch"])
