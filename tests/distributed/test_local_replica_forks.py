"""Local replicas 1..n-1 start as forks of the server that forked replica 0 where that is exact, else as new
processes; either way they die with replica 0 and a replica's failure is reported the same."""
import json
import os
import signal
import sys
import textwrap
import time

import pytest

from distrib.process.fork_client import ForkServer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux only")

SCRIPT = textwrap.dedent("""
    import json, os, signal, sys, torch, distrib
    out, mode = sys.argv[1], sys.argv[2]
    if mode == "startup-variable":
        os.environ["PYTHONHASHSEED"] = "3"     # read at start-up: a fork of the server would not have it
    strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    rid = strategy.replica_id
    if mode == "term":
        def stop(signum, frame):
            open(os.path.join(out, "term%d" % rid), "w").close()
            raise SystemExit(0)
        signal.signal(signal.SIGTERM, stop)
    total = strategy.reduce("SUM", strategy.run(lambda: torch.tensor(1.0 + strategy.replica_id)), axis=None)
    state = {"pid": os.getpid(), "ppid": os.getppid(), "total": total.item(), "argv": sys.argv,
             "cwd": os.getcwd(), "omp": os.environ.get("OMP_NUM_THREADS"), "threads": torch.get_num_threads(),
             "local": os.environ.get("DISTRIB_LOCAL_REPLICA"), "sid_is_pid": os.getsid(0) == os.getpid(),
             "main_file": __file__, "path0": sys.path[0]}
    with open(os.path.join(out, "r%d.tmp" % rid), "w") as f:
        json.dump(state, f)
    os.replace(os.path.join(out, "r%d.tmp" % rid), os.path.join(out, "r%d.json" % rid))
    print("printed by replica", rid)
    if mode == "fail" and rid == 1:
        raise ValueError("replica one broke on shard 7")
    while mode in ("hang", "term"):
        signal.pause()
""")


@pytest.fixture(scope="module")
def server():
    """One preloaded server, as `distrib launch` or the test harness has: replica 0 is forked from it."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "DISTRIB_LAUNCH_FORK")}
    env["OMP_NUM_THREADS"] = "1"
    fork_server = ForkServer(env)
    try:
        assert fork_server.wait_ready(), "the fork server did not start"
        yield fork_server
    finally:
        fork_server.close()


def _run(server, tmp_path, mode, extra_env=None, wait=True, runtime=()):
    script = tmp_path / "replicas.py"
    script.write_text(SCRIPT)
    out = tmp_path / mode
    out.mkdir()
    log = open(tmp_path / f"{mode}.log", "wb")
    proc = server.start([sys.executable, "replicas.py", str(out), mode], dict(server.env, **(extra_env or {})),
                        str(tmp_path), output=log.fileno(), runtime=runtime)
    log.close()
    if wait:
        proc.wait(timeout=180)
    return proc, out, tmp_path / f"{mode}.log"


def _states(out):
    return [json.loads((out / f"r{r}.json").read_text()) for r in range(2)]


def test_replicas_are_forks_of_replica_0s_server_when_exact_and_see_what_a_new_process_sees(server, tmp_path):
    proc, out, log = _run(server, tmp_path, "plain")
    assert proc.returncode == 0, log.read_text()[-3000:]
    zero, one = _states(out)
    assert zero["pid"] == proc.pid and zero["ppid"] != os.getpid()     # replica 0: forked from the server
    assert one["ppid"] == zero["ppid"] != zero["pid"]                  # replica 1: forked from the same server
    assert zero["total"] == one["total"] == 3.0
    assert zero["local"] is None and one["local"].startswith("1/2/")
    for key in ("argv", "cwd", "omp", "threads", "main_file", "path0"):
        assert one[key] == zero[key], key
    assert one["sid_is_pid"] and zero["sid_is_pid"]
    text = log.read_text()
    assert text.count("printed by replica") == 1 and "printed by replica 0" in text   # replica 1's is discarded


def test_replicas_are_new_processes_when_a_start_up_variable_differs_from_the_servers(server, tmp_path):
    proc, out, log = _run(server, tmp_path, "startup-variable")
    assert proc.returncode == 0, log.read_text()[-3000:]
    zero, one = _states(out)
    assert zero["ppid"] != os.getpid()          # replica 0 itself is a fork
    assert one["ppid"] == zero["pid"]           # replica 1 was started by replica 0: a new process
    assert zero["total"] == one["total"] == 3.0
    assert one["omp"] == "1" and one["argv"] == zero["argv"]


def test_a_variable_the_starter_named_as_read_at_run_time_may_differ_for_the_replicas_too(server, tmp_path):
    # Not in the server's environment: unnamed, replica 1 would be a new process (as "a start-up variable differs").
    proc, out, log = _run(server, tmp_path, "plain", {"TUTORIAL_EPOCHS": "3"}, runtime=("TUTORIAL_EPOCHS",))
    assert proc.returncode == 0, log.read_text()[-3000:]
    zero, one = _states(out)
    assert one["ppid"] == zero["ppid"] != zero["pid"]         # forked: the name reached replica 0's line


def _error_line(log):
    lines = [line for line in log.read_text().splitlines() if line.startswith("distrib: error:")]
    assert len(lines) == 1, log.read_text()[-3000:]
    return lines[0]


def test_distrib_launch_fork_0_makes_new_processes_and_a_failure_reads_the_same_either_way(server, tmp_path):
    forked, forked_out, forked_log = _run(server, tmp_path, "fail")
    (tmp_path / "new").mkdir()
    fresh, fresh_out, fresh_log = _run(server, tmp_path / "new", "fail", {"DISTRIB_LAUNCH_FORK": "0"})
    assert _states(forked_out)[1]["ppid"] == _states(forked_out)[0]["ppid"]   # forked
    assert _states(fresh_out)[1]["ppid"] == _states(fresh_out)[0]["pid"]       # a new process
    assert forked.returncode == fresh.returncode == 1
    line = _error_line(forked_log)
    assert line == _error_line(fresh_log)
    assert line == ("distrib: error: local replica 1 (cpu:1) failed with exit code 1: "
                    "[rank1]: ValueError: replica one broke on shard 7")   # (torch prefixes the rank)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" not in next(line for line in f if line.startswith("State:"))
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        return False


def _started(proc, out, log):
    """Both replicas' states, once each has written its file (the program still running)."""
    deadline = time.monotonic() + 120
    while not (out / "r1.json").exists() or not (out / "r0.json").exists():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the replicas never started"
        time.sleep(0.05)  # poll
    return _states(out)


def test_a_forked_replica_dies_with_replica_0_on_sigkill(server, tmp_path):
    proc, out, log = _run(server, tmp_path, "hang", wait=False)
    one = None
    try:
        zero, one = _started(proc, out, log)
        assert one["ppid"] == zero["ppid"] != zero["pid"] and _alive(one["pid"])   # forked
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
        deadline = time.monotonic() + 30
        while _alive(one["pid"]) and time.monotonic() < deadline:
            time.sleep(0.05)  # poll
        assert not _alive(one["pid"]), "local replica 1 outlived replica 0"
    finally:
        proc.kill()
        if one is not None and _alive(one["pid"]):
            os.kill(one["pid"], signal.SIGKILL)


def test_what_the_launcher_sends_replica_0s_group_reaches_its_forked_replicas(server, tmp_path):
    proc, out, log = _run(server, tmp_path, "term", wait=False)
    try:
        zero, one = _started(proc, out, log)
        assert one["ppid"] == zero["ppid"] != zero["pid"]          # forked (in a session of its own)
        proc.signal_group(signal.SIGTERM)       # as `distrib launch` stops a forked task
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
        assert (out / "term0").exists() and (out / "term1").exists()
    finally:
        proc.kill()


GARBAGE_SCRIPT = textwrap.dedent("""
    import json, os, socket, sys
    from distrib.process import fork_channel
    line = fork_channel.current()
    answers = []
    for bad in (b"\\xff not json", b"[1, 2]", json.dumps({"argv": ["ok.py"], "env": {"A": 1}, "cwd": "."}).encode(),
                json.dumps({"argv": [], "env": {}, "cwd": "."}).encode(),
                json.dumps({"argv": ["ok.py"], "env": {}, "cwd": "."}).encode()):   # no descriptors
        socket.send_fds(line.sock, [bad], [])
        answers.append(json.loads(line.sock.recv(65536)))
    with open("sibling.err", "wb") as err:
        pid = line.start([sys.executable, "ok.py"], dict(os.environ), os.getcwd(), stderr=err.fileno())
    json.dump({"answers": answers, "code": line.exit_code(pid, 60)}, open("out.json", "w"))
""")


def test_garbage_on_a_tasks_line_gets_an_error_answer_and_the_line_still_serves(server, tmp_path):
    (tmp_path / "garbage.py").write_text(GARBAGE_SCRIPT)
    (tmp_path / "ok.py").write_text("import sys\nsys.stderr.write('the sibling ran\\n')\n")
    with open(tmp_path / "garbage.log", "wb") as log:
        proc = server.start([sys.executable, "garbage.py"], server.env, str(tmp_path), output=log.fileno())
    assert proc.wait(timeout=60) == 0, (tmp_path / "garbage.log").read_text()[-3000:]
    result = json.loads((tmp_path / "out.json").read_text())
    assert [sorted(a) for a in result["answers"]] == [["error"]] * 5, result
    assert result["code"] == 0 and (tmp_path / "sibling.err").read_text() == "the sibling ran\n"
