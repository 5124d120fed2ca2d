"""docs/checkpoints.md's walk-through, as written: the seeded example killed at a step and resumed under
``distrib launch --max-restarts 1`` prints the uninterrupted run's final loss and weights digest (issue 50)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "checkpoints.md"


def _walk_through_commands() -> list:
    """The ``distrib launch`` lines of the page's walk-through block (the test runs exactly those)."""
    text = PAGE.read_text(encoding="utf-8")
    block = text.split("## Check it yourself", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#")[0].split() for line in block.splitlines() if line.startswith("distrib launch")]


def _final_line(command: list, tmp_path: Path) -> tuple:
    argv = [str(tmp_path / a[len("/tmp/"):]) if a.startswith("/tmp/") else a for a in command[1:]]
    # DISTRIB_LAUNCH_FORK=1 (docs/launcher.md): the launcher imports PyTorch once, in its fork server, and
    # forks every task from it, the first attempt's too; by default ("spare") the first tasks are new
    # processes and, under --max-restarts, a server imports beside them: 3 imports on 2 cores, not 1.
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="80", DISTRIB_LAUNCH_FORK="1")
    proc = subprocess.run([sys.executable, "-m", "distrib", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=400, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    finals = re.findall(r"^\[worker 0\] (final loss \S+ weights sha256 \w+)$", proc.stdout + proc.stderr, re.M)
    assert len(finals) == 1, proc.stdout + proc.stderr
    return finals[0], proc.stderr


def test_a_killed_and_resumed_run_prints_the_uninterrupted_runs_numbers(tmp_path):
    uninterrupted, killed = _walk_through_commands()
    assert "--kill-worker" in killed and "--max-restarts" in killed
    expected, _ = _final_line(uninterrupted, tmp_path)
    got, stderr = _final_line(killed, tmp_path)
    assert "worker 1 was killed by SIGKILL; restarting all tasks (restart 1 of 1)" in stderr
    assert got == expected
