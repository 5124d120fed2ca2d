"""Chief, workers and ps tasks started by a test, each running one scenario of the test's own file.

The launcher ends a whole job when any task dies, so parameter-server fault
tests start the tasks themselves: real processes on 127.0.0.1, ports picked
at run time, ``TF_CONFIG`` as the launcher writes it, each task's output in
a file. Moments are agreed through marker files in ``PS_TEST_DIR``: a task
writes one when it reaches a point (`marker`), the test waits for it
(`Cluster.wait_for_marker`), acts, and may write another that lets the task
go on (`await_marker` on the task's side).

Example (in a test file that ends with ``scenarios[sys.argv[1]]()``)::

    @pytest.fixture
    def start_cluster(tmp_path):
        with cluster_starter(tmp_path, __file__, wait=120.0) as start:
            yield start

    def test_x(start_cluster):
        c = start_cluster("worker_killed", workers=2, ps=1)
        c.wait_for_marker("running.1"); c.kill("worker 1")
        assert c.wait("chief") == 0, c.dump()
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping

import pytest

from distrib.launch.layout import ClusterLayout, build_cluster, task_environment
from distrib.process.ports import reserve_ports
from distrib.testing import start_python

__all__ = ["Cluster", "cluster_starter", "marker", "await_marker"]

MARKER_WAIT = 180.0


class Cluster:
    """One scenario of ``script`` on a chief, ``workers`` workers and ``ps`` ps tasks."""

    def __init__(self, tmp: Path, script: str, scenario: str, *, wait: float, workers: int = 2, ps: int = 1,
                 skip: tuple = (), run: str = "", env: Mapping[str, str] = ()) -> None:
        layout = ClusterLayout(workers=workers, chief=True, ps=ps)
        self.cluster = build_cluster(layout, "127.0.0.1", reserve_ports(len(layout.tasks())))
        self.tmp, self.run, self.timeout = tmp, run, wait
        self.procs: Dict[str, Any] = {}  # subprocess.Popen, or a fork of the test process's server
        for task in layout.tasks():
            if task.name in skip:
                continue
            task_env = task_environment(os.environ, self.cluster, task, num_training_tasks=workers + 1,
                                        restart_count=0)
            task_env.update(OMP_NUM_THREADS="1", PS_TEST_DIR=str(tmp), **dict(env))
            with open(self.log_path(task.name), "wb") as log:
                self.procs[task.name] = start_python([script, scenario], env=task_env, output=log,
                                                       runtime=("PS_TEST_DIR",))

    def log_path(self, name: str) -> Path:
        prefix = f"{self.run}." if self.run else ""
        return self.tmp / f"{prefix}{name.replace(' ', '_')}.log"

    def output(self, name: str) -> str:
        return self.log_path(name).read_text(errors="replace")

    def address(self, job: str, index: int = 0) -> str:
        return self.cluster[job][index]

    def wait_for_marker(self, name: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not (self.tmp / name).exists():
            if time.monotonic() > deadline or self.procs["chief"].poll() is not None:
                pytest.fail(f"marker {name!r} never appeared\n{self.dump()}")
            time.sleep(0.05)  # poll: marker files have no notification

    def kill(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(timeout=30)

    def wait(self, name: str) -> int:
        try:
            return self.procs[name].wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} did not exit within {self.timeout:g}s\n{self.dump()}")

    def result(self) -> dict:
        lines = [line for line in self.output("chief").splitlines() if line.startswith("RESULT ")]
        assert lines, self.dump()
        return json.loads(lines[-1][len("RESULT "):])

    def dump(self) -> str:
        return "\n".join(f"--- {name} (exit {p.poll()}):\n{self.output(name)[-3000:]}"
                         for name, p in self.procs.items())

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=30)


@contextlib.contextmanager
def cluster_starter(tmp: Path, script: str, *, wait: float) -> Iterator[Callable[..., Cluster]]:
    """``start(scenario, **options)`` -> a running `Cluster`; every one started is killed on exit."""
    started: List[Cluster] = []

    def start(scenario: str, **options) -> Cluster:
        started.append(Cluster(tmp, os.path.abspath(script), scenario, wait=wait, **options))
        return started[-1]

    try:
        yield start
    finally:
        for cluster in started:
            cluster.close()


# ------------------------------------------------------------- task side
def marker(name: str) -> None:
    """Written by a task: it reached the point called ``name``."""
    Path(os.environ["PS_TEST_DIR"], name).write_text("1")


def await_marker(name: str) -> None:
    """Called by a task: wait (bounded) until the test writes the marker ``name``."""
    path = Path(os.environ["PS_TEST_DIR"], name)
    deadline = time.monotonic() + MARKER_WAIT
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"marker {name} never appeared")
        time.sleep(0.05)  # poll: marker files have no notification
