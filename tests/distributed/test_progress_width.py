"""The live bar fits the terminal, prefix included, and redraws in place (issue 21).

A real pseudo-terminal of 200, 80 or 40 columns (``TIOCSWINSZ`` on an
``os.openpty`` pair) is the launcher's (or torchrun's) stdout and stderr.
The transcript is split into terminal rows at ``\\n``; within a row each
``\\r`` starts a redraw. Every redraw of the bar must fit the width (else
the terminal wraps it onto a new row and the bar scrolls), several redraws
must share one row (in place), and ``loss`` must be on every redraw.
"""
from __future__ import annotations

import fcntl
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from typing import List

import pytest

from distrib.testing import free_port

pytestmark = [pytest.mark.timeout(240), pytest.mark.skipif(os.name != "posix", reason="POSIX only")]

DEADLINE = 200
STEPS = 12

SCRIPT = '''
import time
import torch
import distrib

STEPS = %d


class Pace(distrib.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.12)  # simulated work: the bar redraws at most every 0.1 s


strategy = distrib.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(4, 3)))
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy",
                  metrics=["accuracy", "sparse_categorical_crossentropy"])
torch.manual_seed(0)
x, y = torch.randn(8 * STEPS, 4), torch.randint(0, 3, (8 * STEPS,))
model.fit(x, y, batch_size=8, epochs=1, shuffle=False, callbacks=[Pace()])
''' % STEPS

_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_BAR = re.compile(r"\b(\d+)/%d\b" % STEPS)


def _run_in_terminal(command: List[str], columns: int) -> str:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["OMP_NUM_THREADS"] = "1"  # torchrun's multi-line notice when it is unset is not ours
    env["DISTRIB_LAUNCH_FORK"] = "1"  # distrib launch forks both tasks from one server: one import of torch
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            close_fds=True, env=env)
    os.close(slave)
    data = b""
    deadline = time.monotonic() + DEADLINE
    try:
        while time.monotonic() < deadline:  # poll
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer of the terminal is gone
                    break
                if not chunk:
                    break
                data += chunk
            elif proc.poll() is not None:
                break
        else:
            raise AssertionError(f"timed out; got so far: {data[-3000:]!r}")
        assert proc.wait(timeout=30) == 0, data.decode("utf-8", "replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return data.decode("utf-8", "replace")


def _check_bar(transcript: str, columns: int) -> None:
    rows = transcript.replace("\r\n", "\n").split("\n")
    bar_rows = []
    for row in rows:
        redraws = [_ESCAPE.sub("", part) for part in row.split("\r")]
        redraws = [part for part in redraws if _BAR.search(part)]
        for part in redraws:
            assert len(part) <= columns, f"{len(part)} > {columns} columns: {part!r}"
            assert re.search(r" - loss: \d", part), f"loss cut at {columns} columns: {part!r}"
        if redraws:
            bar_rows.append({int(_BAR.search(part).group(1)) for part in redraws})
    assert bar_rows, transcript
    # Redrawn in place: one row carries the bar's updates, through to the last step.
    in_place = [steps for steps in bar_rows if len(steps) >= 3]
    assert in_place and STEPS in in_place[-1], (bar_rows, transcript)
    assert len(bar_rows) <= 2, (bar_rows, transcript)  # at most the launcher's redraw below a line


def _launch_command(script) -> List[str]:
    return [sys.executable, "-m", "distrib", "launch", "--workers", "2", str(script)]


def _torchrun_command(script) -> List[str]:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("torchrun not installed next to this interpreter")
    return [torchrun, "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
            "--master_port", str(free_port("127.0.0.1")), str(script)]


@pytest.mark.parametrize("columns", [pytest.param(200, marks=pytest.mark.slow), 80,
                                     pytest.param(40, marks=pytest.mark.slow)])
def test_bar_fits_the_terminal_under_distrib_launch(write_script, columns):
    transcript = _run_in_terminal(_launch_command(write_script("bar.py", SCRIPT)), columns)
    _check_bar(transcript, columns)
    assert "[worker 0] " in transcript
    if columns >= 200:  # room for everything: nothing was given up
        assert re.search(r"━{20} \d+s \d+(us|ms|s)/step - accuracy: \d", transcript), transcript


@pytest.mark.slow
@pytest.mark.parametrize("columns", [200, 80, 40])
def test_bar_fits_the_terminal_under_torchrun(write_script, columns):
    transcript = _run_in_terminal(_torchrun_command(write_script("bar.py", SCRIPT)), columns)
    _check_bar(transcript, columns)
