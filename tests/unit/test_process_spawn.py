"""distrib.process.spawn: the one way distrib starts local processes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from distrib.process.exit_codes import describe_returncode
from distrib.process.spawn import start_process, wait_or_kill

HANG = [sys.executable, "-c", "import threading; threading.Event().wait()"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" not in next(line for line in f if line.startswith("State:"))
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        return False


def test_output_goes_where_asked_and_the_exit_status_is_described():
    with tempfile.TemporaryFile(mode="w+b") as err:
        script = "import sys; print('out'); sys.stderr.write('boom'); sys.exit(3)"
        proc = start_process([sys.executable, "-c", script], os.environ,
                             stdout=subprocess.DEVNULL, stderr=err, new_session=False)
        code = wait_or_kill(proc, 60)
        err.seek(0)
        assert err.read() == b"boom"
    assert code == 3 and describe_returncode(code) == "failed with exit code 3"


def test_a_child_past_its_time_is_killed_not_waited_on():
    proc = start_process(HANG, os.environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    code = wait_or_kill(proc, 0.2)
    assert code == -signal.SIGKILL and describe_returncode(code) == "was killed by SIGKILL"


@pytest.mark.parametrize("new_session", [True, False])
def test_the_child_gets_its_own_process_group_only_when_asked(new_session):
    proc = start_process(HANG, os.environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         new_session=new_session)
    try:
        group = os.getpgid(proc.pid)
        assert (group == proc.pid) if new_session else (group == os.getpgid(0))
    finally:
        wait_or_kill(proc, 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
@pytest.mark.parametrize("new_session", [True, False])
def test_a_child_dies_with_its_parent_even_when_the_parent_is_sigkilled(new_session):
    parent_code = textwrap.dedent(f"""
        import os, subprocess, sys, threading
        from distrib.process.spawn import start_process
        child = start_process({HANG!r}, os.environ, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, new_session={new_session})
        print(child.pid, flush=True)
        threading.Event().wait()
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE,
                              start_new_session=True, text=True)
    child_pid = None
    try:
        child_pid = int(parent.stdout.readline())
        assert _alive(child_pid)
        parent.kill()
        parent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.02)  # poll
        assert not _alive(child_pid), "the child outlived its parent"
    finally:
        parent.kill()
        parent.wait()
        if child_pid is not None and _alive(child_pid):
            os.kill(child_pid, signal.SIGKILL)
