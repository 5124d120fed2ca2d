"""A launch whose tasks all finish ends with one closing line, on the terminal and in launcher.log (issue 50)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_successful_launch_says_so_last(write_script, tmp_path):
    script = write_script("ok.py", """
        import json, os
        print("task", json.loads(os.environ["TF_CONFIG"])["task"]["index"], "done")
    """)
    logs = tmp_path / "logs"
    proc = subprocess.run([sys.executable, "-m", "distrib", "launch", "--workers", "2", "--log-dir", str(logs),
                           str(script)], capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="80"))
    assert proc.returncode == 0, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("distrib launch: every task finished (exit code 0) after "), proc.stderr
    assert "restart" not in last
    assert (logs / "launcher.log").read_text().splitlines()[-1] == last


def test_a_failed_launch_has_no_closing_success_line(write_script, tmp_path):
    script = write_script("bad.py", "raise SystemExit(3)\n")
    proc = subprocess.run([sys.executable, "-m", "distrib", "launch", "--workers", "2", str(script)],
                          capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert proc.returncode == 1
    assert "every task finished" not in proc.stderr
