"""scripts/env.sh says what it does and how long it took, instead of minutes of silence.

The script runs on a copy of the repository's files whose ``.venv/bin/python``
is a stand-in that records its arguments (as pip would run) and answers the
version query, so the test installs nothing.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import stat
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

STAND_IN = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/calls.log"
case "$*" in
  *importlib.metadata*) echo "distrib 0.1.0, torch 2.13.0+cpu" ;;
  *"-e .[test,bench,docs]"*) if [ -n "${FAIL_INSTALL:-}" ]; then echo "ERROR: No matching distribution" >&2; exit 1; fi ;;
esac
"""


@pytest.fixture
def repo(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "scripts").mkdir()
    for name in ("scripts/env.sh", "pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STAND_IN)
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def run_env_sh(repo: pathlib.Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(repo / "scripts" / "env.sh")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def test_an_install_says_what_it_does_and_how_long_it_took(repo):
    proc = run_env_sh(repo)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == ("scripts/env.sh: installing distrib with its test, bench and docs tools into .venv, "
                        "through constraints.txt (torch==2.13.0):")
    assert "1 to 5 minutes the first time" in lines[1] and ".venv/pip.log" in lines[1]
    assert lines[-1].startswith("scripts/env.sh: installed in ") and "(distrib 0.1.0, torch 2.13.0+cpu)" in lines[-1]
    calls = (repo / ".venv" / "bin" / "calls.log").read_text()
    assert "-m pip install -c constraints.txt -e .[test,bench,docs]" in calls


def test_a_second_run_says_it_is_up_to_date_in_one_line(repo):
    assert run_env_sh(repo).returncode == 0
    again = run_env_sh(repo)
    assert again.returncode == 0
    assert again.stdout.splitlines() == [
        "scripts/env.sh: .venv is up to date (pyproject.toml and constraints.txt unchanged since its install)"]


def test_a_failed_install_shows_pips_last_lines_and_fails(repo):
    proc = run_env_sh(repo, FAIL_INSTALL="1")
    assert proc.returncode == 1
    assert "scripts/env.sh: pip failed after " in proc.stdout
    assert "ERROR: No matching distribution" in proc.stdout
    assert not (repo / ".venv" / ".distrib-installed").exists()  # the next run tries again
