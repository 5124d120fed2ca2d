"""`distrib launch` forks its tasks from a preloaded server: a forked task must start as a new process would.

Each test runs the same script twice, forked (the default) and as new
processes (``DISTRIB_LAUNCH_FORK=0``), and compares what the tasks saw.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from distrib.launch import launch
from distrib.process.fork_client import SharedForkServer, can_fork
from distrib.testing import run_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux-only")

_TIMEOUT = 90

_REPORT = '''
import json, os, random, sys
out = sys.argv[1]
state = {
    "name": __name__, "file": __file__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
    "spec": repr(__spec__), "orig_argv": sys.orig_argv, "main_is_here": sys.modules["__main__"].__dict__ is globals(),
    "stdin": sys.stdin.read(), "tf_config": json.loads(os.environ["TF_CONFIG"])["task"],
    "task": os.environ["DISTRIB_TASK_NAME"], "ppid": os.getppid(), "sid_is_pid": os.getsid(0) == os.getpid(),
    "random": random.random(),
}
import numpy, torch
import torch._dynamo.package
state.update(dynamo_cache=torch._dynamo.package.DynamoCache.path_prefix())
state.update(numpy=float(numpy.random.rand()), threads=torch.get_num_threads(),
             omp=os.environ["OMP_NUM_THREADS"], torch_seed=torch.initial_seed(), torch_draw=float(torch.rand(1)))
with open(os.path.join(out, os.environ["DISTRIB_TASK_NAME"].replace(" ", "-") + ".json"), "w") as f:
    json.dump(state, f)
'''


@pytest.fixture(scope="module")
def shared_server():
    """The servers this module's forked runs fork from: one ``import torch`` per start-up environment
    (the tasks of one worker and those of two differ in ``OMP_NUM_THREADS``), not one per launch."""
    shared = SharedForkServer(max_servers=2)
    try:
        yield shared
    finally:
        shared.close()


def _run(script, out, fork: bool, workers: int = 2, **kwargs):
    env = {"DISTRIB_LAUNCH_FORK": "1" if fork else "0"}
    env.update(kwargs.pop("env", {}))
    return launch(str(script), [str(out)], workers=workers, output="capture", timeout=_TIMEOUT,
                  env=env, **kwargs)


def _states(out, workers=2):
    return [json.loads((out / f"worker-{i}.json").read_text()) for i in range(workers)]


def test_a_forked_task_sees_what_a_new_process_sees(write_script, tmp_path, shared_server):
    script = write_script("report.py", _REPORT)
    seen = {}
    for fork in (True, False):
        out = tmp_path / f"fork-{fork}"
        out.mkdir()
        result = _run(script, out, fork, fork_server=shared_server if fork else None)
        assert result.returncode == 0, result.output
        seen[fork] = _states(out)
    forked, fresh = seen[True], seen[False]
    # Forked from the server, not started by this launcher: the fork really happened.
    assert all(s["ppid"] != os.getpid() for s in forked)
    assert all(s["ppid"] == os.getpid() for s in fresh)
    for a, b in zip(forked, fresh):
        for key in ("name", "file", "path0", "cwd", "spec", "main_is_here", "stdin", "tf_config",
                    "task", "sid_is_pid", "omp", "dynamo_cache"):
            assert a[key] == b[key], key
        assert a["argv"] == [b["argv"][0], str(tmp_path / "fork-True")]
        assert a["orig_argv"] == [*b["orig_argv"][:-1], str(tmp_path / "fork-True")]
        assert a["threads"] == int(a["omp"]) == b["threads"]
    # Fresh generators in each fork, as in new processes: the two workers draw differently.
    for states in (forked, fresh):
        for key in ("numpy", "random", "torch_seed", "torch_draw"):
            assert states[0][key] != states[1][key], key


def test_a_module_run_with_dash_m_is_forked_alike(write_script, tmp_path, shared_server):
    write_script("pkg_report/__init__.py", "")
    write_script("pkg_report/main.py", _REPORT)
    seen = {}
    for fork in (True, False):
        out = tmp_path / f"out-{fork}"
        out.mkdir()
        result = launch("pkg_report.main", [str(out)], module=True, workers=2, output="capture",
                        timeout=_TIMEOUT, cwd=str(tmp_path), env={"DISTRIB_LAUNCH_FORK": "1" if fork else "0"},
                        fork_server=shared_server if fork else None)
        assert result.returncode == 0, result.output
        seen[fork] = _states(out)
    for a, b in zip(seen[True], seen[False]):
        for key in ("name", "file", "path0", "cwd", "main_is_here", "tf_config"):
            assert a[key] == b[key], key
        assert a["argv"] == [b["argv"][0], str(tmp_path / "out-True")]
        assert a["orig_argv"] == [*b["orig_argv"][:-1], str(tmp_path / "out-True")]
    assert seen[True][0]["ppid"] != os.getpid()


@pytest.mark.parametrize("body, code", [
    ("sys.exit(3)", 3),
    ("sys.exit('stopped: ' + str(INDEX))", 1),
    ("os._exit(7)", 7),
    ("raise ValueError('bad value on ' + str(INDEX))", 1),
    ("os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
    ("raise KeyboardInterrupt", -signal.SIGINT),
], ids=["exit-3", "exit-message", "os-exit", "exception", "sigkill", "keyboard-interrupt"])
def test_a_forked_task_ends_with_the_status_and_traceback_of_a_new_process(write_script, tmp_path, body, code,
                                                                           shared_server):
    script = write_script("end.py", f'''
        import json, os, signal, sys
        INDEX = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        print("started", INDEX, file=sys.stderr, flush=True)  # one stream: lines keep their order
        with open(os.path.join(os.path.dirname(__file__), "parent"), "w") as f:
            f.write(str(os.getppid()))
        if INDEX == 0:
            {body}
    ''')
    outputs, parents = {}, {}
    for fork in (True, False):
        result = _run(script, tmp_path, fork, workers=1, fork_server=shared_server if fork else None)
        assert result.tasks["worker 0"].returncode == code, result.output
        outputs[fork] = result.outputs["worker 0"]
        parents[fork] = int((tmp_path / "parent").read_text())
    assert parents[True] != os.getpid() and parents[False] == os.getpid()  # a fork of the server; a new process
    assert outputs[True] == outputs[False]
    if code == 1:
        assert "fork_server" not in outputs[True]


def test_the_server_starts_with_the_tasks_start_up_variables(write_script, tmp_path):
    """PYTHONHASHSEED is read when Python starts: the server, started with the tasks' environment, has it."""
    script = write_script("hash.py", '''
        import json, os, sys
        print(json.dumps({"hash": hash("distrib"), "ppid": os.getppid()}))
    ''')
    result = _run(script, tmp_path, True, workers=1, env={"PYTHONHASHSEED": "7"})
    assert result.returncode == 0, result.output
    first = json.loads(result.outputs["worker 0"].strip().splitlines()[-1])
    again = _run(script, tmp_path, False, workers=1, env={"PYTHONHASHSEED": "7"})
    second = json.loads(again.outputs["worker 0"].strip().splitlines()[-1])
    assert first["ppid"] != os.getpid() and second["ppid"] == os.getpid()
    assert first["hash"] == second["hash"]  # the seed was applied either way


def test_the_decision_to_fork(tmp_path):
    python = sys.executable
    script = tmp_path / "train.py"
    script.write_text("")
    base = {"PATH": "/usr/bin", "TF_CONFIG": "a", "DISTRIB_TASK_NAME": "worker 0", "OMP_NUM_THREADS": "2"}
    other_task = dict(base, TF_CONFIG="b", DISTRIB_TASK_NAME="worker 1", COLUMNS="70")
    assert can_fork([python, str(script), "--x"], other_task, base, python=python)
    assert can_fork([python, "-m", "pkg.train"], other_task, base, python=python, cwd=str(tmp_path))
    assert not can_fork(["/other/python", str(script)], base, base, python=python)
    assert not can_fork([python, "-u", str(script)], base, base, python=python)
    assert not can_fork([python, "-m"], base, base, python=python)
    for key, value in (("PYTHONPATH", "/elsewhere"), ("LD_PRELOAD", "x.so"), ("OMP_NUM_THREADS", "1")):
        assert not can_fork([python, str(script)], dict(base, **{key: value}), base, python=python), key
    assert not can_fork([python, str(script)], base, dict(base, PYTHONPATH="/src"), python=python)
    (tmp_path / "torch").mkdir()  # a new process would import this one
    assert not can_fork([python, str(script)], base, base, python=python)


def test_the_decision_to_fork_where_torch_dynamo_fixes_its_cache_directory(tmp_path):
    # torch._dynamo, preloaded, fixed its cache directory from the server's environment: a task
    # forks where the directory a new process would fix is the same, set or left to torch's default.
    import torch._dynamo.package
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    python = sys.executable
    script = tmp_path / "train.py"
    script.write_text("")
    base = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    default = dict(base, TORCHINDUCTOR_CACHE_DIR=default_cache_dir())
    elsewhere = dict(base, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"))

    def forks(task, server):
        return can_fork([python, str(script)], task, server, python=python)

    assert torch._dynamo.package.DynamoCache is not None
    assert forks(base, default) and forks(default, base) and forks(default, default)
    assert forks(elsewhere, dict(elsewhere, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache") + "/"))
    assert not forks(elsewhere, base) and not forks(base, elsewhere) and not forks(elsewhere, default)
    relative = dict(base, TORCHINDUCTOR_CACHE_DIR="cache")  # depends on where the process loads
    assert not forks(relative, base) and not forks(base, relative)
    other_tmp = dict(base, TMPDIR=str(tmp_path))  # a differing TMPDIR already refuses; the default is unknown
    assert not forks(dict(other_tmp, TORCHINDUCTOR_CACHE_DIR=default_cache_dir()), other_tmp)


def test_tasks_die_with_their_server_and_are_reported_killed(write_script, tmp_path):
    script = write_script("block.py", '''
        import json, os, sys, threading
        INDEX = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        with open(os.path.join(sys.argv[1], f"ppid-{INDEX}.tmp"), "w") as f:
            f.write(str(os.getppid()))
        os.replace(os.path.join(sys.argv[1], f"ppid-{INDEX}.tmp"), os.path.join(sys.argv[1], f"ppid-{INDEX}"))
        if INDEX == 1:
            import time
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(sys.argv[1], "ppid-0")) and time.monotonic() < deadline:
                time.sleep(0.01)  # poll for the other task's file
            os.kill(int(open(os.path.join(sys.argv[1], "ppid-0")).read()), 9)
        threading.Event().wait()
    ''')
    result = _run(script, tmp_path, True)
    assert result.returncode != 0
    assert {s.returncode for s in result.tasks.values()} == {-signal.SIGKILL}, result.output


def test_by_default_first_tasks_are_new_processes_and_a_restarted_task_is_a_fork_of_the_spare(write_script, tmp_path):
    script = write_script("restart.py", '''
        import json, os, sys
        attempt = os.environ["DISTRIB_RESTART_COUNT"]
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        with open(os.path.join(sys.argv[1], f"ppid-{index}-{attempt}"), "w") as f:
            f.write(str(os.getppid()))
        if attempt == "0" and index == 0:
            import time
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(sys.argv[1], "ppid-1-0")) and time.monotonic() < deadline:
                time.sleep(0.01)  # poll: worker 1 has written its file before this one fails
            sys.exit(1)
        if attempt == "0":
            import threading
            threading.Event().wait()  # stopped by the launcher when worker 0 fails
    ''')
    result = launch(str(script), [str(tmp_path)], workers=2, output="capture", timeout=_TIMEOUT, max_restarts=1,
                    env={"DISTRIB_LAUNCH_FORK": None})
    assert result.returncode == 0 and result.restarts == 1, result.output
    ppid = {(i, a): int((tmp_path / f"ppid-{i}-{a}").read_text()) for i in (0, 1) for a in (0, 1)}
    assert ppid[0, 0] == ppid[1, 0] == os.getpid()  # started by this launcher, importing in parallel
    assert ppid[0, 1] == ppid[1, 1] != os.getpid()  # forks of the one spare server


def test_without_restarts_no_spare_is_started(write_script, tmp_path):
    script = write_script("once.py", '''
        import os, sys
        with open(os.path.join(sys.argv[1], "ppid"), "w") as f:
            f.write(str(os.getppid()))
    ''')
    result = launch(str(script), [str(tmp_path)], workers=1, output="capture", timeout=_TIMEOUT,
                    env={"DISTRIB_LAUNCH_FORK": None})
    assert result.returncode == 0, result.output
    assert int((tmp_path / "ppid").read_text()) == os.getpid()


def test_a_bad_mode_is_one_clear_error(tmp_path):
    (tmp_path / "x.py").write_text("")
    with pytest.raises(ValueError, match=r"DISTRIB_LAUNCH_FORK must be 0, 1 or spare, got 'yes'"):
        launch(str(tmp_path / "x.py"), workers=1, env={"DISTRIB_LAUNCH_FORK": "yes"})


def test_launches_given_shared_servers_fork_from_them_one_server_per_start_up_environment(write_script, tmp_path):
    """What the test harness relies on: one `import torch` for many launches, never a stale server."""
    script = write_script("report.py", _REPORT)
    shared = SharedForkServer(max_servers=2)
    runs = iter(range(100))

    def parents(**env):
        out = tmp_path / f"run-{next(runs)}"
        out.mkdir()
        result = launch(str(script), [str(out)], workers=1, output="capture", timeout=_TIMEOUT,
                        env={"DISTRIB_LAUNCH_FORK": None, **env}, fork_server=shared)
        assert result.returncode == 0, result.output
        (state,) = _states(out, workers=1)
        assert state["ppid"] != os.getpid()  # forked from a server
        return state["ppid"]

    def path(folder):  # a start-up variable the first server lacks; distrib stays importable
        return os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))

    try:
        first = parents()
        assert parents() == first
        other = parents(PYTHONPATH=path(tmp_path))
        assert other != first
        assert parents() == first and parents(PYTHONPATH=path(tmp_path)) == other
        third = parents(PYTHONPATH=path(tmp_path / "x"))  # two servers at most: the least recently used goes
        assert third not in (first, other)
        with pytest.raises(ProcessLookupError):
            os.kill(first, 0)
        assert parents(PYTHONPATH=path(tmp_path)) == other

        os.kill(other, signal.SIGKILL)
        next(s for s in shared._servers if s.env.get("PYTHONPATH") == path(tmp_path))._proc.wait(timeout=_TIMEOUT)
        assert parents(PYTHONPATH=path(tmp_path)) not in (other, third)  # a dead server is replaced
    finally:
        shared.close()


def test_run_python_is_subprocess_run_forked_and_times_out_alike(write_script, tmp_path):
    script = write_script("talk.py", "import os, sys\nprint('out', sys.argv[1:], os.getcwd())\n"
                                     "print('err', file=sys.stderr)\nprint(os.getppid(), file=sys.stderr)\n"
                                     "sys.exit(3)\n")
    # A start-up environment of this test's own: no server has it yet.
    env = {k: v for k, v in os.environ.items() if k != "DISTRIB_LAUNCH_FORK"}
    env["FORK_TEST_OWN_ENVIRONMENT"] = str(tmp_path)
    first = run_python([script, "a"], env=env, cwd=tmp_path)     # asked once: a new process, no server
    forked = run_python([script, "a"], env=env, cwd=tmp_path)    # asked again: a server, and a fork of it
    fresh = subprocess.run([sys.executable, str(script), "a"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout) == (3, fresh.stdout)
    assert (first.returncode, first.stdout) == (3, fresh.stdout)
    assert forked.stderr.splitlines()[0] == fresh.stderr.splitlines()[0] == "err"
    assert int(first.stderr.splitlines()[1]) == os.getpid()    # a new process
    assert int(forked.stderr.splitlines()[1]) != os.getpid()   # a fork of the test process's server
    assert int(fresh.stderr.splitlines()[1]) == os.getpid()

    slow = write_script("slow.py", "import sys, time\nprint('started', flush=True)\ntime.sleep(600)\n")
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        run_python([slow], env=env, timeout=3)
    assert "started" in caught.value.output


def test_run_python_forks_where_only_the_callers_own_runtime_variables_differ(write_script, tmp_path):
    script = write_script("own.py", "import os, sys\nprint(os.environ['FORK_TEST_OWN_VALUE'], os.getppid())\n")
    # A start-up environment of this test's own: no server has it yet.
    env = {k: v for k, v in os.environ.items() if k != "DISTRIB_LAUNCH_FORK"}
    env["FORK_TEST_OWN_ENVIRONMENT"] = str(tmp_path)
    own = ("FORK_TEST_OWN_VALUE",)
    runs = [run_python([script], env={**env, "FORK_TEST_OWN_VALUE": value}, runtime=own, cwd=tmp_path)
            for value in ("1", "2", "3")]
    plain = run_python([script], env={**env, "FORK_TEST_OWN_VALUE": "4"}, cwd=tmp_path)  # not named: its own
    seen = [run.stdout.split() for run in [*runs, plain]]
    assert [value for value, _ in seen] == ["1", "2", "3", "4"], seen
    assert int(seen[0][1]) == os.getpid()                               # asked once: a new process
    assert int(seen[1][1]) != os.getpid() and seen[2][1] == seen[1][1]  # then forks of one server
    assert int(seen[3][1]) == os.getpid()                               # another value, not named: new
