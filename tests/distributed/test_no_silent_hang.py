"""A missing or killed task ends the others with an error that names it, in bounded time."""
import json
import os
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

from distrib.testing import free_port, run_python, start_python

TRAIN = textwrap.dedent("""
    import os, signal, sys, torch, distrib
    victim = int(os.environ.get("VICTIM", "-1"))
    strategy = distrib.MultiWorkerMirroredStrategy(
        communication_options=distrib.CommunicationOptions(timeout_seconds=float(os.environ["TIMEOUT"])))
    with strategy.scope():
        model = torch.nn.Linear(64, 64)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    print("ready", flush=True)
    for step in range(1_000_000):
        if step == 30 and strategy.replica_id == victim:
            os.kill(os.getpid(), getattr(signal, os.environ.get("SIGNAL", "SIGKILL")))
        model(torch.randn(8, 64)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
""")


def _tf_config(ports, index):
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                       "task": {"type": "worker", "index": index}})


_OWN = ("TIMEOUT", "VICTIM", "SIGNAL")  # this file's variables: the program reads them itself


def _env(ports, index, timeout, victim=-1, sig="SIGKILL"):
    return dict(os.environ, TF_CONFIG=_tf_config(ports, index), TIMEOUT=str(timeout),
                VICTIM=str(victim), OMP_NUM_THREADS="1", SIGNAL=sig)


def _run(script, ports, index, timeout, victim=-1, limit=60):
    """The program as task ``index``, to its end: forked from the harness's preloaded server where exact."""
    return run_python([script], env=_env(ports, index, timeout, victim), timeout=limit, runtime=_OWN)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path


def test_missing_worker_is_named_after_the_timeout(script):
    ports = [free_port(), free_port()]
    chief = _run(script, ports, 0, timeout=3)
    out, err = chief.stdout, chief.stderr
    assert chief.returncode != 0
    assert "waiting for worker 1 (127.0.0.1:%d)" % ports[1] in err
    last = err.strip().splitlines()[-1]
    assert "RendezvousTimeoutError" in last and "worker 1 (127.0.0.1:%d)" % ports[1] in last, last
    assert "ready" not in out


def test_worker_without_its_chief_is_told_so(script):
    ports = [free_port(), free_port()]
    worker = _run(script, ports, 1, timeout=3)
    assert worker.returncode != 0
    last = worker.stderr.strip().splitlines()[-1]
    assert "chief worker 0 (127.0.0.1:%d)" % ports[0] in last, last


@pytest.mark.parametrize("victim", [0, pytest.param(1, marks=pytest.mark.slow)])  # same path; 1 in the slow run
def test_worker_killed_mid_training_is_named_by_the_survivor(script, victim):
    ports = [free_port(), free_port()]
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda i: _run(script, ports, i, timeout=10, victim=victim, limit=90), range(2)))
    assert procs[victim].returncode == -9
    survivor = 1 - victim
    assert procs[survivor].returncode not in (0, None)
    err = procs[survivor].stderr
    named = "chief worker 0" if victim == 0 else "worker 1 (127.0.0.1:%d)" % ports[1]
    assert any(named in line and "gone" in line for line in err.splitlines()), err[-2000:]


def test_a_stopped_chief_is_named_as_not_responding_soon_after_the_timeout(script, tmp_path):
    """SIGSTOP: the chief's store still accepts connections but never answers; 5 s timeout."""
    ports = [free_port(), free_port()]
    outputs = [tmp_path / f"task-{i}.txt" for i in range(2)]
    procs = []
    try:
        for i, path in enumerate(outputs):
            with open(path, "wb") as output:  # the task's output and errors; it keeps its own descriptor
                procs.append(start_python([script], output=output, runtime=_OWN,
                                          env=_env(ports, i, timeout=5, victim=0, sig="SIGSTOP")))
        code = procs[1].wait(timeout=90)  # hard limit; before the fix the exit hung ~30 s more
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    err = outputs[1].read_text(errors="replace")
    assert code not in (0, None)
    last = [line for line in err.splitlines() if "worker 0 (127.0.0.1:%d)" % ports[0] in line]
    assert last and "not responding" in last[-1] and "gone" not in last[-1], err[-2000:]
