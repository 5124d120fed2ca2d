"""``distrib launch --elastic``: a lost worker is started again alone, the chief too (the launcher hosts the store).

The task scripts are tiny plain-Python files (no torch); a task that must
wait for another polls for its file with a deadline.
"""
from __future__ import annotations

import os

import pytest

from distrib.launch import launch
from distrib.launch.cli import parse_args
from distrib.process.ports import reserve_ports

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(os.name != "posix", reason="POSIX only")]

SCRIPT = '''
import json, os, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
name = f"{task['type']}-{task['index']}"
out, failing = sys.argv[1], sys.argv[2]
joined = os.environ.get("DISTRIB_ELASTIC_JOIN") == "1"
assert os.environ.get("DISTRIB_ELASTIC") == "1"
attempt = os.environ["DISTRIB_RESTART_COUNT"]
with open(os.path.join(out, f"{name}-attempt{attempt}-{'join' if joined else 'start'}-{os.getpid()}"), "w"):
    pass
if name == failing and attempt == "0" and not joined:
    os.kill(os.getpid(), 9)
if name == "worker-1" and failing == "worker-1-twice":
    os.kill(os.getpid(), 9)
if name == "worker-1" and failing == "worker-1-error" and attempt == "0":
    sys.exit(3)
if name == "worker-0" and failing in ("worker-1", "worker-1-twice"):  # the chief outlives the loss: it waits for the replacement
    deadline = time.monotonic() + 60
    while not any("join" in f for f in os.listdir(out)):  # poll
        if time.monotonic() > deadline:
            sys.exit(99)
        time.sleep(0.02)  # poll
'''


def _launch(write_script, tmp_path, failing, max_restarts=2):
    script = write_script("task.py", SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    result = launch(str(script), [str(out), failing], workers=3, elastic=True, max_restarts=max_restarts,
                    output="capture", timeout=90, grace_seconds=2)
    return result, sorted(f.rsplit("-", 1)[0] for f in os.listdir(out))


def test_a_lost_worker_is_replaced_alone(write_script, tmp_path):
    result, started = _launch(write_script, tmp_path, "worker-1")
    assert result.returncode == 0, result.output
    assert (result.replacements, result.restarts) == (1, 0)
    assert started == ["worker-0-attempt0-start", "worker-1-attempt0-join", "worker-1-attempt0-start",
                       "worker-2-attempt0-start"]
    assert "worker 1 was killed by SIGKILL; starting a replacement for it alone" in result.output


def test_a_lost_chief_is_replaced_alone_the_launcher_hosts_the_store(write_script, tmp_path):
    result, started = _launch(write_script, tmp_path, "worker-0")
    assert result.returncode == 0, result.output
    assert (result.replacements, result.restarts) == (1, 0)
    assert started == ["worker-0-attempt0-join", "worker-0-attempt0-start", "worker-1-attempt0-start",
                       "worker-2-attempt0-start"]
    assert "worker 0 was killed by SIGKILL; starting a replacement for it alone" in result.output


def test_the_tasks_are_told_the_launcher_hosts_the_store(write_script, tmp_path):
    script = write_script("env.py", "import os, sys\nprint('store:', os.environ.get('DISTRIB_LAUNCHER_STORE'))\n")
    hosted = launch(str(script), workers=2, elastic=True, output="capture", timeout=60)
    plain = launch(str(script), workers=2, output="capture", timeout=60)
    assert hosted.output.count("store: 1") == 2, hosted.output
    assert plain.output.count("store: None") == 2, plain.output


def test_replacements_count_against_max_restarts(write_script, tmp_path):
    result, started = _launch(write_script, tmp_path, "worker-1-twice", max_restarts=1)
    assert result.returncode == 1
    assert result.replacements == 1 and started.count("worker-1-attempt0-join") == 1
    assert "giving up" in result.output


def test_an_error_exit_restarts_the_whole_job_it_would_recur_in_a_replacement(write_script, tmp_path):
    result, started = _launch(write_script, tmp_path, "worker-1-error")
    assert result.returncode == 0, result.output
    assert (result.replacements, result.restarts) == (0, 1)
    assert not any("join" in s for s in started)


LEAVING = '''
import json, os, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
name = f"{task['type']}-{task['index']}"
out = sys.argv[1]
grow = os.environ.get("DISTRIB_ELASTIC_GROW") == "1"
with open(os.path.join(out, f"{name}-{'grow' if grow else 'start'}"), "w"):
    pass
if name == "worker-1" and not grow:  # leaves on purpose: what distrib.comm.elastic does before its exit 0
    open(os.path.join(os.environ["DISTRIB_ELASTIC_LEFT_DIR"], f"left-{os.getpid()}"), "w").close()
    sys.exit(0)
if name == "worker-0":  # the job goes on until the rejoined worker ran
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(out, "worker-1-grow")):  # poll
        if time.monotonic() > deadline:
            sys.exit(99)
        time.sleep(0.02)  # poll
'''


def test_a_worker_that_leaves_ends_nothing_and_rejoins(write_script, tmp_path):
    script = write_script("leaving.py", LEAVING)
    out = tmp_path / "out"
    out.mkdir()
    result = launch(str(script), [str(out)], workers=3, elastic=True, rejoins=1, output="capture", timeout=90,
                    grace_seconds=2)
    assert result.returncode == 0, result.output
    assert (result.replacements, result.restarts, result.failures) == (0, 0, [])
    assert sorted(os.listdir(out)) == ["worker-0-start", "worker-1-grow", "worker-1-start", "worker-2-start"]
    assert "worker 1 left the job (exit 0); starting it again to rejoin the running job" in result.output


def test_the_cli_flag():
    assert parse_args(["launch", "--workers", "2", "--elastic", "--max-restarts", "3", "t.py"]).elastic
    assert not parse_args(["launch", "t.py"]).elastic
    assert parse_args(["launch", "--elastic", "--rejoins", "2", "t.py"]).rejoins == 2


JOINING = '''
import json, os, sys
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
assert os.environ["DISTRIB_ELASTIC_START_WORKERS"] == "2"
if task == 2:  # one of the workers that join the running job (--workers 2:3); it fails
    if sys.argv[1] == "after-admission":  # what distrib.comm.elastic does once the chief admitted it
        open(os.path.join(os.environ["DISTRIB_ELASTIC_LEFT_DIR"], f"joined-{os.getpid()}"), "w").close()
    sys.exit(1)
'''


def test_a_joiner_that_fails_before_it_was_admitted_ends_nothing(write_script):
    script = write_script("joining.py", JOINING)
    result = launch(str(script), ["before-admission"], workers=3, start_workers=2, elastic=True, output="capture",
                    timeout=90, grace_seconds=2)
    assert result.returncode == 0, result.output
    assert "worker 2 failed with exit code 1 before it joined the running job; the job goes on" in result.output


def test_a_joiner_that_fails_once_admitted_is_the_jobs_failure(write_script):
    script = write_script("joining.py", JOINING)
    result = launch(str(script), ["after-admission"], workers=3, start_workers=2, elastic=True, output="capture",
                    timeout=90, grace_seconds=2)
    assert result.returncode == 1, result.output
    assert "before it joined" not in result.output


def test_a_late_node_whose_workers_cannot_join_fails_its_launcher(write_script):
    """``--nnodes 2:3``: node 2 runs only a joiner; when it fails, nothing else of that node went on."""
    script = write_script("joining.py", JOINING)
    result = launch(str(script), ["before-admission"], workers=1, hosts=["127.0.0.1"] * 3, node_rank=2,
                    master_port=reserve_ports(1)[0], start_workers=2, elastic=True, output="capture", timeout=90,
                    grace_seconds=2)
    assert result.returncode == 1, result.output
    assert "before it joined" not in result.output
