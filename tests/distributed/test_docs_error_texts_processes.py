"""The error texts of docs/troubleshooting.md that need processes to happen, made to happen.

Real tasks on 127.0.0.1 with free ports: a rendezvous that a task never
joins, a worker that dies or never runs the collective, a parameter server
that is killed, two replicas given an odd batch, and the launcher reporting a
failed, a killed and a preempted task. The page quotes the default 60 s
waits; these runs wait ``TIMEOUT`` seconds, and the quote is read with that
number. `tests/unit/test_docs_error_texts.py` parses the page, holds the
one-process reproducers and checks that every quote has exactly one.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import pathlib
import sys
import tempfile
import textwrap
from typing import Callable, Dict

import pytest

from distrib.testing import free_port, run_python, run_script

pytestmark = [pytest.mark.timeout(240), pytest.mark.skipif(os.name != "posix", reason="POSIX only")]

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT = 3
_WORK = tempfile.mkdtemp(prefix="distrib-doc-errors-")


def _write(name: str, source: str) -> str:
    path = os.path.join(_WORK, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(source).lstrip())
    return path


def _alone(index: int) -> str:
    """What a task of two says when it is started alone (index 0: the chief, 1: the other)."""
    script = _write("alone.py", f"""
        import distrib
        distrib.MultiWorkerMirroredStrategy(
            communication_options=distrib.CommunicationOptions(timeout_seconds={TIMEOUT}))
        """)
    config = {"cluster": {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]},
              "task": {"type": "worker", "index": index}}
    proc = run_python([script], env=dict(os.environ, TF_CONFIG=json.dumps(config)), cwd=_WORK, timeout=120)
    assert proc.returncode == 1, proc.stderr
    return proc.stderr


@functools.lru_cache(maxsize=None)
def _chief_alone() -> str:
    return _alone(0)


def _peer(mode: str) -> str:
    """Worker 0's output when worker 1 is gone (``lost``) or alive but not in the collective (``idle``)."""
    script = _write("peer.py", f"""
        import os, sys, threading, torch, distrib
        strategy = distrib.MultiWorkerMirroredStrategy(
            communication_options=distrib.CommunicationOptions(timeout_seconds={TIMEOUT}))
        def total():
            return strategy.reduce(distrib.ReduceOp.SUM, strategy.run(lambda: torch.ones(1)), axis=None)
        total()  # both tasks: the connections are up
        if strategy.cluster_resolver.task_id == 1:
            if sys.argv[1] == "lost":
                os._exit(0)
            threading.Event().wait(60)   # alive, but never joins the collective; the launcher stops it
        total()
        """)
    result = run_script(script, num_workers=2, args=[mode], timeout=150)
    assert result.returncode == 1, result.output
    return result.outputs["worker 0"]


@functools.lru_cache(maxsize=None)
def _parameter_server() -> str:
    """Model.fit without steps_per_epoch, then a killed ps, under an in-process PS cluster."""
    script = _write("ps.py", """
        import torch, distrib
        from distrib.testing import in_process_cluster
        strategy = distrib.experimental.ParameterServerStrategy(
            distrib.testing.create_in_process_cluster(num_workers=1, num_ps=1))
        with strategy.scope():
            model = distrib.Model(torch.nn.Linear(2, 1))
            model.compile(optimizer="sgd", loss="mse")
        def dataset_fn(context):
            return distrib.data.Dataset.from_tensor_slices((torch.ones(8, 2), torch.ones(8, 1))).batch(4).repeat()
        try:
            model.fit(distrib.data.experimental.DatasetCreator(dataset_fn), epochs=1, verbose=0)
        except ValueError as error:
            print(f"{type(error).__name__}: {error}")
        coordinator = distrib.coordinator.ClusterCoordinator(strategy)
        layer = model.module
        def step():
            return layer(torch.ones(1, 2)).sum()
        coordinator.schedule(step).fetch()
        ps = in_process_cluster._CLUSTERS[0].procs["ps 0"]
        ps.kill()
        ps.wait()
        try:
            coordinator.schedule(step).fetch()
        except Exception as error:
            print(f"{type(error).__name__}: {error}")
        """)
    proc = run_python([script], cwd=_WORK, timeout=150)
    return proc.stdout + proc.stderr


def _odd_global_batch_on_two_replicas() -> str:
    script = _write("odd_batch.py", """
        import numpy as np, torch, distrib
        strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
        with strategy.scope():
            model = distrib.Model(torch.nn.Linear(2, 1))
            model.compile(optimizer="sgd", loss="mse")
        model.fit(np.zeros((66, 2), np.float32), np.zeros((66, 1), np.float32), batch_size=33, verbose=0)
        """)
    # OMP_NUM_THREADS as the harness's clusters have it: replica 1 is then a fork where replica 0 is one
    proc = run_python([script], cwd=_WORK, timeout=150, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return proc.stderr


def _launcher(body: str, *options: str) -> str:
    """What ``distrib launch --workers 2 OPTIONS script`` prints; the script is plain Python (no torch)."""
    script = _write("task.py", textwrap.dedent("""
        import json, os, signal, sys
        INDEX = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        ATTEMPT = int(os.environ["DISTRIB_RESTART_COUNT"])
        """) + textwrap.dedent(body))
    # New processes only (DISTRIB_LAUNCH_FORK=0): the launcher and its tasks import no torch, and a
    # launch that may restart would otherwise start a preloaded spare server (an `import torch`).
    proc = run_python(["-m", "distrib", "launch", "--workers", "2", "--grace-seconds", "5", *options, script],
                      env=dict(os.environ, DISTRIB_LAUNCH_FORK="0"), cwd=_WORK, timeout=150)
    return proc.stdout + proc.stderr


#: A part of each quote (unique on the page) -> what makes the code produce it, with processes.
REPRODUCERS: Dict[str, Callable[[], str]] = {
    "to join (timeout 60s)": _chief_alone,
    "RendezvousTimeoutError: timed out after 60s": _chief_alone,
    "never accepted connections": lambda: _alone(1),
    "WorkerLostError": lambda: _peer("lost"),
    "CollectiveTimeoutError": lambda: _peer("idle"),
    "UnavailableError: ps 0": _parameter_server,
    "fit under ParameterServerStrategy needs steps_per_epoch": _parameter_server,
    "use a multiple of 2": _odd_global_batch_on_two_replicas,
    "failed with exit code 1 (...); stopped the other task": lambda: _launcher("""
        if INDEX == 1:
            raise SystemExit("worker 1 gives up")
        signal.pause()  # worker 0 waits to be stopped
        """),
    "restarting all tasks (restart 1 of 3)": lambda: _launcher("""
        if INDEX == 0 and ATTEMPT == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        """, "--max-restarts", "3"),
    "from outside distrib launch (preempted?": lambda: _launcher("""
        if INDEX == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()
        """),
}


def _unit_module():
    path = ROOT / "tests" / "unit" / "test_docs_error_texts.py"
    spec = importlib.util.spec_from_file_location("docs_error_texts_unit", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # it imports its neighbours (test_ps_registered)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


@pytest.mark.parametrize("key", list(REPRODUCERS))
def test_the_code_produces_the_quoted_error(key: str) -> None:
    unit = _unit_module()
    quote = unit.quote_for(key).replace("60s", f"{TIMEOUT}s")
    unit.assert_produced(quote, REPRODUCERS[key]())
