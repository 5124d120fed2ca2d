"""`distrib launch` and the test harness with real processes on 127.0.0.1.

The task scripts are tiny plain-Python files (no torch) written to tmp_path.
Where one task must wait for another to be up, it polls for a file with a
deadline; nothing relies on timing.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

from distrib.launch import RESTART_EXIT_CODE, LaunchTimeoutError, launch
from distrib.testing import ClusterRunError, run_cluster, run_script

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(os.name != "posix", reason="POSIX only")]

CLI_TIMEOUT = 90

# Shared by the task scripts: who am I, and a way to wait for a sibling's file.
PRELUDE = '''
import json, os, sys, threading, time
CONFIG = json.loads(os.environ["TF_CONFIG"])
TYPE, INDEX = CONFIG["task"]["type"], CONFIG["task"]["index"]
ATTEMPT = int(os.environ["DISTRIB_RESTART_COUNT"])
DIR = sys.argv[1] if len(sys.argv) > 1 else "."

def mark(name):
    tmp = os.path.join(DIR, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, os.path.join(DIR, name))

def wait_for(name):
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(DIR, name)):  # poll
        if time.monotonic() > deadline:
            sys.exit(99)
        time.sleep(0.02)  # poll

def block():
    threading.Event().wait()
'''


@pytest.fixture
def task_script(write_script):
    def write(body: str, name: str = "task.py"):
        return write_script(name, PRELUDE + body)
    return write


def run_cli(args, cwd=None):
    return subprocess.run([sys.executable, "-m", "distrib", "launch", *map(str, args)],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT, cwd=cwd)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def pid_in(tmp_path, name: str) -> int:
    return int((tmp_path / name).read_text())


# -- output -------------------------------------------------------------------------

def test_two_workers_get_tf_config_and_prefixed_output(task_script, tmp_path):
    script = task_script('''
print(f"hello from {TYPE} {INDEX} of {len(CONFIG['cluster']['worker'])}")
print("cluster " + json.dumps(CONFIG["cluster"]))
print("env", os.environ["DISTRIB_LAUNCHED"], os.environ["PYTHONUNBUFFERED"],
      os.environ["OMP_NUM_THREADS"], ATTEMPT)
print("args", sys.argv[2:])
print(f"oops from {INDEX}", file=sys.stderr)
''')
    proc = run_cli(["--workers", 2, "--output-from", "all", script, tmp_path, "--workers", "7"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert all(line.startswith(("[worker 0] ", "[worker 1] ")) for line in out), out
    for i in (0, 1):
        assert f"[worker {i}] hello from worker {i} of 2" in out
        assert f"[worker {i}] args ['--workers', '7']" in out
        assert f"[worker {i}] oops from {i}" in proc.stderr.splitlines()
        env_line = next(l for l in out if l.startswith(f"[worker {i}] env "))
        launched, unbuffered, threads, attempt = env_line.split()[3:]
        assert (launched, unbuffered, attempt) == ("1", "1", "0") and int(threads) >= 1
    clusters = [json.loads(l.split("cluster ", 1)[1]) for l in out if " cluster " in l]
    assert len(clusters) == 2 and clusters[0] == clusters[1]
    addresses = clusters[0]["worker"]
    assert len(set(addresses)) == 2 and all(a.startswith("127.0.0.1:") for a in addresses)


def test_lines_of_different_tasks_never_mix(task_script, tmp_path):
    script = task_script('''
for n in range(300):
    print(f"{INDEX}:{n}:" + str(INDEX) * 300)
''')
    result = run_script(script, 2, args=[tmp_path])
    assert result.returncode == 0, result.output
    lines = [l for l in result.output.splitlines() if l.startswith("[worker")]
    assert len(lines) == 600
    for line in lines:
        prefix, body = line.split("] ", 1)
        index = prefix[-1]
        assert body.startswith(f"{index}:") and body.endswith(":" + index * 300), line
    assert result.outputs["worker 1"].splitlines()[-1] == "1:299:" + "1" * 300


def test_module_mode_runs_a_package_module(write_script, tmp_path):
    write_script("pkg/__init__.py", "")
    write_script("pkg/hello.py", '''
import json, os, sys
print("module", json.loads(os.environ["TF_CONFIG"])["task"]["index"], sys.argv[1:])
''')
    proc = run_cli(["--workers", 2, "--output-from", "all", "-m", "pkg.hello", "x"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == [
        "[worker 0] module 0 ['x']", "[worker 1] module 1 ['x']"]


# -- failures ------------------------------------------------------------------------

def test_a_failing_task_is_named_and_the_others_are_stopped(task_script, tmp_path):
    script = task_script('''
if INDEX == 0:
    mark("w0")
    block()
wait_for("w0")
print("worker 1 giving up", flush=True)
sys.exit(3)
''')
    proc = run_cli(["--workers", 2, "--output-from", "all", "--grace-seconds", 5, script, tmp_path])
    assert proc.returncode == 1
    assert "distrib launch: worker 1 failed with exit code 3; stopped the other task" \
        in proc.stderr.splitlines()
    assert "[worker 1] worker 1 giving up" in proc.stdout
    assert gone(pid_in(tmp_path, "w0"))


def test_a_task_killed_by_a_signal_is_reported_as_such(task_script, tmp_path):
    script = task_script('''
if INDEX == 1:
    mark("w1")
    block()
wait_for("w1")
import signal
os.kill(os.getpid(), signal.SIGKILL)
''')
    result = run_script(script, 2, args=[tmp_path])
    assert result.returncode == 1
    assert result.failures == ["worker 0 was killed by SIGKILL"]
    assert "distrib launch: worker 0 was killed by SIGKILL; stopped the other task" in result.output
    assert result.tasks["worker 1"].stopped
    assert result.tasks["worker 1"].returncode == -signal.SIGTERM
    assert gone(pid_in(tmp_path, "w1"))


def test_ps_tasks_are_stopped_when_training_finishes(task_script, tmp_path):
    script = task_script('''
if TYPE == "ps":
    mark("ps")
    block()
wait_for("ps")
print(TYPE, "done", sorted(CONFIG["cluster"]))
''')
    result = launch(str(script), [tmp_path], workers=1, chief=True, ps=1, evaluator=True,
                    output="capture", timeout=60, grace_seconds=5)
    assert result.returncode == 0, result.output
    assert result.failures == []
    assert result.tasks["ps 0"].stopped and not result.tasks["worker 0"].stopped
    assert "chief done ['chief', 'evaluator', 'ps', 'worker']" in result.outputs["chief"]
    assert result.outputs["evaluator"].startswith("evaluator done")
    assert gone(pid_in(tmp_path, "ps"))


# -- restarts ----------------------------------------------------------------------------

def test_max_restarts_restarts_the_group_after_a_failure(task_script, tmp_path):
    script = task_script('''
print("attempt", ATTEMPT, "address", CONFIG["cluster"]["worker"][INDEX])
if INDEX == 1 and ATTEMPT == 0:
    sys.exit(4)
''')
    result = run_script(script, 2, args=[tmp_path], max_restarts=1)
    assert result.returncode == 0, result.output
    assert (result.restarts, result.preemption_restarts) == (1, 0)
    assert result.failures == ["worker 1 failed with exit code 4"]
    assert ("distrib launch: worker 1 failed with exit code 4; restarting all tasks "
            "(restart 1 of 1)") in result.output
    lines = result.outputs["worker 1"].splitlines()
    assert [l.split()[1] for l in lines] == ["0", "1"]
    first, second = (l.split()[3] for l in lines)
    assert first != second  # fresh ports on restart


def test_restarts_run_out(task_script, tmp_path):
    script = task_script('''
if INDEX == 0:
    sys.exit(4)
''')
    result = run_script(script, 2, args=[tmp_path], max_restarts=1)
    assert result.returncode == 1
    assert result.restarts == 1
    assert result.failures == ["worker 0 failed with exit code 4"] * 2
    assert "worker 0 failed with exit code 4; " in result.output.splitlines()[-1]
    assert result.output.splitlines()[-1].endswith("giving up after 1 restart")


def test_restart_exit_code_restarts_without_counting(task_script, tmp_path):
    script = task_script(f'''
print("attempt", ATTEMPT)
if INDEX == 0 and ATTEMPT < 2:
    sys.exit({RESTART_EXIT_CODE})
''')
    result = run_script(script, 2, args=[tmp_path], max_restarts=0)
    assert result.returncode == 0, result.output
    assert (result.restarts, result.preemption_restarts) == (2, 2)
    assert "not counted against max restarts" in result.output
    assert result.outputs["worker 0"].split() == ["attempt", "0", "attempt", "1", "attempt", "2"]


def test_peers_of_a_preempted_task_may_finish_before_being_stopped(task_script, tmp_path):
    # Worker 0 plays a peer still saving the checkpoint when worker 1 exits
    # with the restart code: it exits by itself, later, and must not get SIGTERM.
    script = task_script(f'''
import signal
if ATTEMPT == 0:
    if INDEX == 1:
        mark("w1")
        sys.exit({RESTART_EXIT_CODE})
    signal.signal(signal.SIGTERM, lambda *_: (mark("term"), sys.exit(1)))
    wait_for("w1")
    pid, deadline = int(open(os.path.join(DIR, "w1")).read()), time.monotonic() + 60
    while time.monotonic() < deadline:  # poll until worker 1 has exited and been reaped
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.02)  # poll
    sys.exit({RESTART_EXIT_CODE})
''')
    result = run_script(script, 2, args=[tmp_path])
    assert result.returncode == 0, result.output
    assert (result.restarts, result.preemption_restarts) == (1, 1)
    assert not (tmp_path / "term").exists()


def test_a_real_failure_after_a_preemption_still_counts(task_script, tmp_path):
    script = task_script(f'''
if INDEX == 1:
    sys.exit({RESTART_EXIT_CODE} if ATTEMPT == 0 else 3)
''')
    result = run_script(script, 2, args=[tmp_path], max_restarts=0)
    assert result.returncode == 1
    assert result.restarts == 1
    assert result.failures[1] == "worker 1 failed with exit code 3"
    assert str(RESTART_EXIT_CODE) in result.failures[0]


# -- the launcher itself is stopped ----------------------------------------------------

def _start_blocking_cluster(task_script, tmp_path):
    script = task_script('''
mark(f"w{INDEX}")
print("ready", flush=True)
block()
''')
    # A shell starts background jobs with SIGINT ignored, and the launcher
    # keeps an ignored signal ignored; reset it so the test runs the same anywhere.
    reset_sigint = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                    "os.execv(sys.executable, [sys.executable] + sys.argv[1:])")
    launcher = subprocess.Popen(
        [sys.executable, "-c", reset_sigint, "-m", "distrib", "launch", "--workers", "2", "--output-from", "all",
         "--grace-seconds", "5", str(script), str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    while len(seen) < 2:  # the test's timeout bounds this if the launcher hangs
        line = launcher.stdout.readline()
        assert line, "launcher ended before both workers were ready"
        if line.endswith("] ready\n"):
            seen.add(line.split("]")[0])
    return launcher, [pid_in(tmp_path, "w0"), pid_in(tmp_path, "w1")]


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_launcher_stops_every_task(task_script, tmp_path, signum, code):
    launcher, pids = _start_blocking_cluster(task_script, tmp_path)
    launcher.send_signal(signum)
    _, err = launcher.communicate(timeout=CLI_TIMEOUT)
    assert launcher.returncode == code, err
    assert f"received {signal.Signals(signum).name}; stopped 2 running tasks" in err
    assert all(gone(pid) for pid in pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_tasks_die_with_a_killed_launcher(task_script, tmp_path):
    launcher, pids = _start_blocking_cluster(task_script, tmp_path)
    launcher.kill()
    launcher.communicate(timeout=CLI_TIMEOUT)
    deadline = time.monotonic() + 30
    while not all(gone(pid) for pid in pids):  # poll: orphans are reaped outside our control
        assert time.monotonic() < deadline, f"tasks {pids} outlived their launcher"
        time.sleep(0.05)  # poll


def test_timeout_stops_everything_with_a_clear_error(task_script, tmp_path):
    script = task_script('''
mark(f"w{INDEX}")
block()
''')
    with pytest.raises(LaunchTimeoutError, match=r"distrib launch: timed out after 2 s; stopped "
                                                 r"worker 0, worker 1") as info:
        launch(str(script), [tmp_path], workers=2, timeout=2, output="capture", grace_seconds=5)
    assert all(status.stopped for status in info.value.result.tasks.values())
    for name in ("w0", "w1"):
        if (tmp_path / name).exists():
            assert gone(pid_in(tmp_path, name))


def test_cli_timeout_exits_124(task_script, tmp_path):
    script = task_script("block()\n")
    proc = run_cli(["--workers", 2, "--timeout", 2, "--grace-seconds", 5, script, tmp_path])
    assert proc.returncode == 124
    assert proc.stderr.splitlines()[-1] == \
        "distrib launch: timed out after 2 s; stopped worker 0, worker 1"


def test_missing_script_is_an_error_before_anything_starts(tmp_path):
    proc = run_cli(["--workers", 2, tmp_path / "nope.py"])
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"distrib launch: script not found: {tmp_path / 'nope.py'}"


# -- run_cluster ----------------------------------------------------------------------------

def describe_task(offset, scale=1):
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    return {"type": task["type"], "index": task["index"] + offset,
            "array": np.arange(2) * scale, "pair": (task["index"], os.environ["OMP_NUM_THREADS"])}


def fail_on_worker_1(started_marker):
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    print(f"worker {index} started", flush=True)
    if index == 0:
        open(started_marker, "w").close()
        threading.Event().wait()
    # Fail only once worker 0 has printed, so its output is there to be shown.
    deadline = time.monotonic() + 60
    while not os.path.exists(started_marker) and time.monotonic() < deadline:
        time.sleep(0.05)  # poll
    raise RuntimeError("boom from worker 1")


def test_run_cluster_returns_values_in_rank_order():
    values = run_cluster(describe_task, 2, chief=True, args=(10,), kwargs={"scale": 3})
    assert values == [
        {"type": "chief", "index": 10, "array": [0, 3], "pair": [0, "1"]},
        {"type": "worker", "index": 10, "array": [0, 3], "pair": [0, "1"]},
        {"type": "worker", "index": 11, "array": [0, 3], "pair": [1, "1"]},
    ]


def test_run_cluster_names_the_failed_task(tmp_path):
    with pytest.raises(ClusterRunError) as info:
        run_cluster(fail_on_worker_1, 2, args=(str(tmp_path / "worker-0-started"),))
    message = str(info.value)
    first_line = message.splitlines()[0]
    assert first_line == ("run_cluster(test_launcher:fail_on_worker_1): "
                          "worker 1 failed with exit code 1")
    assert "--- worker 1 failed with exit code 1; last lines of its output:" in message
    assert "RuntimeError: boom from worker 1" in message
    assert "--- worker 0 was stopped by the launcher (SIGTERM); last lines of its output:" in message
    assert "    worker 0 started" in message
