"""A restart read in an 80-column terminal (issue 50): the survivor's lost-worker error folded to the
width between words, no progress bar of the dead attempt left on screen, one line saying where
training resumed. A real ``distrib launch --workers 2 --max-restarts 1`` on a pseudo-terminal."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = 80
BAR = re.compile(r"\d+/\d+ .*(━|\[=|\.\.\.\.)")  # a progress row: "12/16 ━━━━..." or "[====...."


def screen(transcript: str) -> list:
    """The rows a terminal keeps of ``transcript``: ``\\r`` returns to the row's start, ``ESC[K`` clears
    to its end, ``\\n`` ends it (no wrapping: a row longer than the terminal stays long here)."""
    rows, row, col = [], [], 0
    for token in re.findall(r"\x1b\[K|\r|\n|[^\r\n\x1b]+|\x1b", transcript):
        if token == "\n":
            rows.append("".join(row).rstrip())
            row, col = [], 0
        elif token == "\r":
            col = 0
        elif token == "\x1b[K":
            del row[col:]
        else:
            row[col:col + len(token)] = list(token)
            col += len(token)
    if row:
        rows.append("".join(row).rstrip())
    return rows


def run_on_a_terminal(argv: list, env: dict, timeout: float) -> tuple:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, COLUMNS, 0, 0))
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=ROOT, env=env,
                            start_new_session=True)
    os.close(slave)
    chunks: list = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=30)
    os.close(master)
    return code, b"".join(chunks).decode("utf-8", "replace")


def test_a_restart_reads_as_one_in_80_columns(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    # DISTRIB_LAUNCH_FORK=1 (docs/launcher.md): every task, the restarted ones too, forks from one
    # preloaded server, so PyTorch is imported once, not once per first task and again in the server
    env.update(PYTHONPATH=str(ROOT / "src"), TERM="xterm", DISTRIB_LAUNCH_FORK="1")
    code, transcript = run_on_a_terminal(
        [sys.executable, "-m", "distrib", "launch", "--workers", "2", "--max-restarts", "1",
         "examples/seeded_backup.py", str(tmp_path / "backup"), "--kill-worker", "1", "--at-step", "13",
         "--progress"], env, timeout=400)
    rows = screen(transcript)
    text = "\n".join(rows)
    assert code == 0, text
    too_wide = [row for row in rows if len(row) > COLUMNS]
    assert not too_wide, text
    restart = next(i for i, row in enumerate(rows)
                   if "worker 1 was killed by SIGKILL; restarting all tasks" in row)
    second_start = next(i for i, row in enumerate(rows) if i > restart and "distrib launch: starting" in row)
    lost = [i for i, row in enumerate(rows) if "WorkerLostError" in row]
    if lost:  # the survivor's error, folded: each row prefixed, words whole
        following = rows[lost[0] + 1:restart]
        assert all(row.startswith("[worker 0] ") for row in rows[lost[0]:restart] if row), text
        unfolded = " ".join(row[len("[worker 0] "):].strip() for row in [rows[lost[0]], *following])
        assert "worker 1 (127.0.0.1:" in unfolded and ") is gone: " in unfolded, text
    between = rows[min(lost + [restart]):second_start]
    assert not [row for row in between if BAR.search(row)], "a dead attempt's progress bar stayed:\n" + text
    resumed = [row for row in rows if "resumed at" in row]
    assert len(resumed) == 1, text
    assert re.fullmatch(r"\[worker 0\] resumed at epoch 1, step 10 \(backup saved \d+ s before the failure\)",
                        resumed[0]), text
    assert rows[-1].startswith("distrib launch: every task finished (exit code 0) after "), text


def test_the_screen_model_keeps_what_a_terminal_keeps():
    assert screen("12/16 ━━\r\x1b[K[worker 0] error\n13/16 ━━━") == ["[worker 0] error", "13/16 ━━━"]
    assert screen("abc\rX\n") == ["Xbc"]


@pytest.fixture(autouse=True)
def _posix_only():
    if not hasattr(pty, "openpty"):
        pytest.skip("needs a pseudo-terminal")
