"""What a person sees under `distrib launch`: a live bar in a terminal, one-line errors, a summary.

The terminal is a real pseudo-terminal (`os.openpty`): the launcher's stdout
and stderr are its slave end, the test reads the master end with a deadline.
"""
from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time

import pytest

from distrib.launch import launch
from distrib.testing import run_script

pytestmark = [pytest.mark.timeout(180), pytest.mark.skipif(os.name != "posix", reason="POSIX only")]

DEADLINE = 150

BAR_SCRIPT = '''
import os, sys, time
import torch
import distrib

GO = sys.argv[1]
STEPS = 8


class Pace(distrib.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch == STEPS - 2:
            deadline = time.monotonic() + 120
            while not os.path.exists(GO):  # poll
                if time.monotonic() > deadline:
                    sys.exit(98)
                time.sleep(0.02)  # poll

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.15)  # simulated work: the bar redraws at most every 0.1 s


print("tty flag", os.environ.get("DISTRIB_PROGRESS_TTY"), flush=True)
strategy = distrib.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = distrib.Model(torch.nn.Linear(4, 1))
    model.compile(optimizer="sgd", loss="mse")
torch.manual_seed(0)
x, y = torch.randn(8 * STEPS, 4), torch.randn(8 * STEPS, 1)
model.fit(x, y, batch_size=8, epochs=1, shuffle=False, callbacks=[Pace()])
print("done", flush=True)
'''

BAR_UPDATE = re.compile(r"\r\x1b\[K\[worker 0\] +(\d+)/8 ")


def read_pty(master: int, proc: subprocess.Popen, until, deadline: float) -> bytes:
    """Read the terminal until ``until(text)`` holds or the launcher exits (then drain)."""
    data = b""
    while time.monotonic() < deadline:  # poll
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                return data
            if not chunk:
                return data
            data += chunk
            if until is not None and until(data.decode("utf-8", "replace")):
                return data
        elif proc.poll() is not None and until is None:
            return data
    raise AssertionError(f"timed out reading the terminal; got so far: {data[-3000:]!r}")


def test_progress_bar_updates_live_in_a_terminal(write_script, tmp_path):
    script = write_script("bar.py", BAR_SCRIPT)
    go = tmp_path / "go"
    master, slave = os.openpty()
    # DISTRIB_LAUNCH_FORK=1: both tasks fork from one preloaded server (one import of torch, not two)
    proc = subprocess.Popen([sys.executable, "-m", "distrib", "launch", "--workers", "2", "--output-from", "all",
                             str(script), str(go)], env=dict(os.environ, DISTRIB_LAUNCH_FORK="1"),
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    deadline = time.monotonic() + DEADLINE
    try:
        def three_updates(text: str) -> bool:
            return len({int(n) for n in BAR_UPDATE.findall(text) if int(n) < 8}) >= 3

        before = read_pty(master, proc, three_updates, deadline).decode("utf-8", "replace")
        # The chief is now blocked before its 7th step: these updates came while the epoch ran.
        assert proc.poll() is None
        assert "done" not in before
        go.write_text("go")
        after = read_pty(master, proc, None, deadline).decode("utf-8", "replace")
        assert proc.wait(timeout=30) == 0, before + after
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    transcript = before + after
    assert "[worker 0] tty flag 1" in transcript
    seen = sorted({int(n) for n in BAR_UPDATE.findall(before)})
    assert len([n for n in seen if n < 8]) >= 3, seen
    assert re.search(r"\[worker 0\]  ?8/8 ━{20} \d+s \d+(us|ms|s)/step - loss: \d", after), after
    # Other tasks' lines start on a row of their own, never inside the bar.
    for match in re.finditer(r"\[worker 1\]", transcript):
        start = match.start()
        assert transcript[max(0, start - 4):start].endswith(("\n", "\x1b[K")) or start == 0, \
            repr(transcript[max(0, start - 80):start + 40])


def test_progress_is_one_line_per_epoch_when_not_a_terminal(write_script, tmp_path):
    script = write_script("bar.py", BAR_SCRIPT)
    go = tmp_path / "go"
    go.write_text("go")
    result = run_script(str(script), num_workers=2, args=[go], timeout=DEADLINE)
    assert result.returncode == 0, result.output
    chief = result.outputs["worker 0"]
    assert "tty flag None" in chief and "\r" not in chief
    bars = [l for l in chief.splitlines() if "/8 " in l]
    assert len(bars) == 1 and re.match(r" ?8/8 ━{20} ", bars[0]), chief


ERROR_SCRIPT = '''
import json, os, sys
import distrib
from distrib.cluster import TFConfigClusterResolver

if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
    if sys.argv[1] == "user":
        raise ValueError("a bug in the user's own code")
    TFConfigClusterResolver('{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, '
                            '"task": {"type": "worker", "index": 5}}')
print("worker 0 finished", flush=True)
'''

CAUSE = ("ClusterConfigError: TF_CONFIG['task']['index']: 5 is out of range for job 'worker' "
         "with 2 tasks (valid 0..1)")


def test_a_distrib_error_is_one_line_and_the_summary_names_it(write_script):
    script = write_script("err.py", ERROR_SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "distrib", "launch", "--workers", "2",
                           str(script), "distrib"], capture_output=True, text=True, timeout=DEADLINE)
    assert proc.returncode == 1
    worker1 = [l for l in proc.stderr.splitlines() if l.startswith("[worker 1]")]
    assert worker1 == [f"[worker 1] distrib: worker 1: {CAUSE} (full traceback: set "
                       "DISTRIB_VERBOSE=1 or use distrib launch --verbose)"], proc.stderr
    summary = proc.stderr.splitlines()[-1]
    assert summary.startswith(f"distrib launch: worker 1 failed with exit code 1 ({CAUSE});"), \
        proc.stderr


def test_verbose_brings_the_traceback_back_and_user_errors_keep_theirs(write_script):
    script = write_script("err.py", ERROR_SCRIPT)
    verbose = launch(str(script), ["distrib"], workers=2, output="capture", timeout=DEADLINE,
                     verbose=True)
    assert verbose.returncode == 1
    text = verbose.outputs["worker 1"]
    assert text.startswith("Traceback (most recent call last):")
    assert text.rstrip().endswith(CAUSE.replace("ClusterConfigError", "distrib.cluster.errors.ClusterConfigError"))

    user = launch(str(script), ["user"], workers=2, output="capture", timeout=DEADLINE)
    assert user.returncode == 1
    assert user.outputs["worker 1"].startswith("Traceback (most recent call last):")
    assert ("distrib launch: worker 1 failed with exit code 1 (ValueError: a bug in the user's "
            "own code);") in user.output
