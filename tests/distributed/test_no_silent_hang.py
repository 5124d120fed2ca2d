"""A missing or killed task ends the others with an error that names it, in bounded time."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from distrib.testing import free_port

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


def _start(script, ports, index, timeout, victim=-1, sig="SIGKILL"):
    env = dict(os.environ, TF_CONFIG=_tf_config(ports, index), TIMEOUT=str(timeout),
               VICTIM=str(victim), OMP_NUM_THREADS="1", SIGNAL=sig)
    return subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path


def test_missing_worker_is_named_after_the_timeout(script):
    ports = [free_port(), free_port()]
    chief = _start(script, ports, 0, timeout=3)
    out, err = chief.communicate(timeout=60)
    assert chief.returncode != 0
    assert "waiting for worker 1 (127.0.0.1:%d)" % ports[1] in err
    last = err.strip().splitlines()[-1]
    assert "RendezvousTimeoutError" in last and "worker 1 (127.0.0.1:%d)" % ports[1] in last, last
    assert "ready" not in out


def test_worker_without_its_chief_is_told_so(script):
    ports = [free_port(), free_port()]
    worker = _start(script, ports, 1, timeout=3)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode != 0
    last = err.strip().splitlines()[-1]
    assert "chief worker 0 (127.0.0.1:%d)" % ports[0] in last, last


@pytest.mark.parametrize("victim", [0, pytest.param(1, marks=pytest.mark.slow)])  # same path; 1 in the slow run
def test_worker_killed_mid_training_is_named_by_the_survivor(script, victim):
    ports = [free_port(), free_port()]
    procs = [_start(script, ports, i, timeout=10, victim=victim) for i in range(2)]
    outs = [p.communicate(timeout=90) for p in procs]
    assert procs[victim].returncode == -9
    survivor = 1 - victim
    assert procs[survivor].returncode not in (0, None)
    err = outs[survivor][1]
    named = "chief worker 0" if victim == 0 else "worker 1 (127.0.0.1:%d)" % ports[1]
    assert any(named in line and "gone" in line for line in err.splitlines()), err[-2000:]


def test_a_stopped_chief_is_named_as_not_responding_soon_after_the_timeout(script):
    """SIGSTOP: the chief's store still accepts connections but never answers; 5 s timeout."""
    ports = [free_port(), free_port()]
    procs = [_start(script, ports, i, timeout=5, victim=0, sig="SIGSTOP") for i in range(2)]
    try:
        _, err = procs[1].communicate(timeout=90)  # hard limit; before the fix the exit hung ~30 s more
    finally:
        for p in procs:
            p.kill()
            p.communicate()
    assert procs[1].returncode not in (0, None)
    last = [line for line in err.splitlines() if "worker 0 (127.0.0.1:%d)" % ports[0] in line]
    assert last and "not responding" in last[-1] and "gone" not in last[-1], err[-2000:]
