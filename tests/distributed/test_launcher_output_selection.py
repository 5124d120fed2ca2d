"""Whose output reaches the terminal under `distrib launch`, and every task's log in a file.

Real `distrib launch` processes with 2 and 8 worker tasks on 127.0.0.1; the
tasks are plain Python (no torch) that print one line to each stream. The
launcher's stdout and stderr are pipes here (line mode), except in the last
test, where they are a pseudo-terminal 60 columns wide.
"""
from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

pytestmark = [pytest.mark.timeout(150), pytest.mark.skipif(os.name != "posix", reason="POSIX only")]

CLI_TIMEOUT = 120

TASK = '''
import json, os, sys
task = json.loads(os.environ["TF_CONFIG"])["task"]
name = task["type"] if task["type"] in ("chief", "evaluator") else f"{task['type']} {task['index']}"
print(f"result from {name}")
print(f"warning from {name}", file=sys.stderr)
'''


def run_cli(args, cwd=None):
    return subprocess.run([sys.executable, "-m", "distrib", "launch", *map(str, args)],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT, cwd=cwd)


def task_lines(text: str, kind: str) -> list:
    """The task names whose ``kind`` line (``result`` or ``warning``) is in ``text``, in order seen."""
    return [m.group(1) for m in re.finditer(rf"^\[([a-z]+(?: \d+)?)\] {kind} from \1$", text, re.M)]


@pytest.fixture
def task(write_script):
    return write_script("task.py", TASK)


def test_by_default_two_workers_show_the_chiefs_output_and_both_workers_errors(task):
    proc = run_cli(["--workers", 2, task])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[worker 0] result from worker 0"]
    assert sorted(task_lines(proc.stderr, "warning")) == ["worker 0", "worker 1"], proc.stderr


def test_with_a_chief_task_the_default_is_the_chief(task):
    proc = run_cli(["--chief", "--workers", 2, task])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[chief] result from chief"]
    assert sorted(task_lines(proc.stderr, "warning")) == ["chief", "worker 0", "worker 1"]


def test_all_shows_both_workers_and_none_shows_neither(task):
    everything = run_cli(["--workers", 2, "--output-from", "all", task])
    assert everything.returncode == 0, everything.stderr
    assert sorted(task_lines(everything.stdout, "result")) == ["worker 0", "worker 1"]
    nothing = run_cli(["--workers", 2, "--output-from", "none", task])
    assert nothing.returncode == 0, nothing.stderr
    assert nothing.stdout == ""
    assert sorted(task_lines(nothing.stderr, "warning")) == ["worker 0", "worker 1"]


def test_eight_workers_show_the_chosen_ones_and_log_every_one_to_its_file(task, tmp_path):
    logs = tmp_path / "logs"
    proc = run_cli(["--workers", 8, "--output-from", "1,worker:6", "--log-dir", logs, task])
    assert proc.returncode == 0, proc.stderr
    assert sorted(task_lines(proc.stdout, "result")) == ["worker 1", "worker 6"]
    assert len(proc.stdout.splitlines()) == 2, proc.stdout
    assert sorted(task_lines(proc.stderr, "warning")) == [f"worker {i}" for i in range(8)]
    assert sorted(p.name for p in logs.iterdir()) == sorted(["launcher.log", *(f"worker-{i}.log" for i in range(8))])
    for i in range(8):
        lines = (logs / f"worker-{i}.log").read_text().splitlines()
        assert lines[0].startswith("-- distrib launch started ")
        assert sorted(lines[1:]) == [f"result from worker {i}", f"warning from worker {i}"], lines
    launcher = (logs / "launcher.log").read_text()
    assert "distrib launch: starting worker 0 (127.0.0.1:" in launcher and "worker 7 (127.0.0.1:" in launcher


def test_eight_workers_by_default_show_one_result(task):
    proc = run_cli(["--workers", 8, task])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[worker 0] result from worker 0"]
    assert len(task_lines(proc.stderr, "warning")) == 8


def test_a_second_launch_appends_to_the_logs(task, tmp_path):
    logs = tmp_path / "logs"
    for _ in range(2):
        assert run_cli(["--workers", 2, "--log-dir", logs, task]).returncode == 0
    lines = (logs / "worker-1.log").read_text().splitlines()
    assert [line.startswith("-- distrib launch started ") for line in lines].count(True) == 2
    assert lines.count("result from worker 1") == 2


def test_a_task_the_job_does_not_have_is_one_line_and_nothing_starts(task, tmp_path):
    proc = run_cli(["--workers", 2, "--output-from", "worker:5", "--log-dir", tmp_path / "logs", task])
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "distrib launch: --output-from worker:5 names worker 5, but this job has worker 0..1"]
    assert not (tmp_path / "logs").exists()


def _read_until_exit(master: int, proc: subprocess.Popen, deadline: float) -> str:
    data = b""
    while time.monotonic() < deadline:  # poll the terminal until every writer is gone
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the launcher and its tasks closed the terminal
                break
            if not chunk:
                break
            data += chunk
        elif proc.poll() is not None:
            break
    else:
        raise AssertionError(f"timed out reading the terminal: {data[-2000:]!r}")
    return data.decode("utf-8", "replace")


def test_the_launchers_lines_wrap_at_the_terminals_width(task):
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-m", "distrib", "launch", "--workers", "8", str(task)],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True, env=env)
    os.close(slave)
    try:
        text = _read_until_exit(master, proc, time.monotonic() + CLI_TIMEOUT)
        assert proc.wait(timeout=30) == 0, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    rows = [row.replace("\x1b[K", "").split("\r")[-1] for row in text.replace("\r\n", "\n").split("\n")]
    start = next(i for i, row in enumerate(rows) if row.startswith("distrib launch: starting worker 0"))
    wrapped = rows[start:start + 6]
    assert all(len(row) <= 60 for row in wrapped), wrapped
    ends = next(i for i, row in enumerate(wrapped) if "worker 7 (127.0.0.1:" in row)  # the whole line
    assert ends >= 2 and all(re.match(r"    worker \d \(127\.0\.0\.1:\d+\)", row) for row in wrapped[1:ends + 1]), \
        wrapped  # continuation rows are indented and hold whole tasks, never a task cut in two
