"""Jobs that a stranger floods, and tasks with different secrets, as real processes on 127.0.0.1.

* two MWMS tasks with different ``DISTRIB_JOB_SECRET`` s: each names the
  mismatch and the other's address, long before the rendezvous timeout;
* 2,000 idle connections to an MWMS chief's store (the chief limited to 1,024
  descriptors): the job finishes (slow);
* stalled and 1 GiB unauthenticated calls to every port of a parameter-server
  job: the job finishes and the ps does not grow by the announced size (slow).
"""
from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

import pytest

from distrib.launch.layout import ClusterLayout, build_cluster, task_environment
from distrib.process.ports import reserve_ports

HERE = os.path.abspath(__file__)
TIMEOUT = 60.0


def _start(tmp: Path, scenario: str, workers: int, env_of: Dict[int, Dict[str, str]],
           nofile: Dict[int, int] = {}) -> List[subprocess.Popen]:  # noqa: B006 - read only
    layout = ClusterLayout(workers=workers, chief=False, ps=0)
    cluster = build_cluster(layout, "127.0.0.1", reserve_ports(len(layout.tasks())))
    procs = []
    for index, task in enumerate(layout.tasks()):
        env = task_environment(os.environ, cluster, task, num_training_tasks=workers, restart_count=0)
        env.update(OMP_NUM_THREADS="1", PS_TEST_DIR=str(tmp), **env_of.get(index, {}))
        limit = nofile.get(index)

        def lower(limit=limit):
            if limit:
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

        log = open(tmp / f"task{index}.log", "wb")
        procs.append(subprocess.Popen([sys.executable, HERE, scenario], env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=lower))
        log.close()
    procs[0].address = cluster["worker"][0]  # type: ignore[attr-defined]
    return procs


def _stop(procs: List[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {seconds:g}s")
        time.sleep(0.05)  # poll


# --------------------------------------------------------------- scenarios
def scenario_mwms() -> None:
    import torch

    import distrib
    from distrib.comm.options import CommunicationOptions

    strategy = distrib.MultiWorkerMirroredStrategy(
        communication_options=CommunicationOptions(timeout_seconds=TIMEOUT))
    marker_dir = Path(os.environ["PS_TEST_DIR"])
    (marker_dir / f"ready.{strategy.cluster_resolver.task_id}").write_text("1")
    deadline = time.monotonic() + 300
    while not (marker_dir / "attacked").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # poll: the test floods the store, then says so
    total = 0.0
    for step in range(20):
        total += float(strategy.reduce(distrib.ReduceOp.SUM, torch.tensor([float(step)]), axis=None))
    # a fresh connection to the store, accepted during the flood
    from distrib.comm.rendezvous import store_client

    host, port = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][0].rsplit(":", 1)
    store_client(host, int(port), 2, 30.0).set(f"after-flood/{strategy.cluster_resolver.task_id}", "1")
    print("RESULT", json.dumps({"total": total}), flush=True)


def scenario_ps_flood() -> None:
    from ps_task_harness import await_marker, marker
    from test_parameter_server_auth import linear_job

    strategy, coordinator, step_fn = linear_job()
    first = float(coordinator.fetch(coordinator.schedule(step_fn)))
    store = strategy._runtime._store
    ports = [int(store.get(f"distrib/ps/grpc_port/{rank}")) for rank in range(3)]
    Path(os.environ["PS_TEST_DIR"], "ports.json").write_text(json.dumps(ports))
    marker("ready")
    await_marker("attacked")
    losses = [coordinator.schedule(step_fn) for _ in range(40)]
    coordinator.join()
    print("RESULT", json.dumps({"first": first, "last": float(losses[-1].fetch())}), flush=True)


# ------------------------------------------------------------------- tests
@pytest.mark.timeout(120)
def test_a_secret_mismatch_is_named_on_every_node_before_the_timeout(tmp_path):
    procs = _start(tmp_path, "mwms", 2, {0: {"DISTRIB_JOB_SECRET": "secret-of-node-0"},
                                         1: {"DISTRIB_JOB_SECRET": "secret-of-node-1"}})
    try:
        chief_log, worker_log = tmp_path / "task0.log", tmp_path / "task1.log"
        procs[1].wait(timeout=TIMEOUT / 2)  # the worker fails at once, well before the 60 s timeout
        worker_out = worker_log.read_text()
        assert procs[1].returncode != 0
        assert "job secret mismatch" in worker_out and procs[0].address in worker_out, worker_out[-3000:]
        _wait_for(lambda: "job secret mismatch" in chief_log.read_text(), TIMEOUT / 2, "the chief's report")
        assert procs[0].poll() is None  # still waiting for a task with the right secret
        line = next(x for x in chief_log.read_text().splitlines() if "job secret mismatch" in x)
        # the stranger's host, once per host (not per source port), never the chief's own address
        assert "a connection from 127.0.0.1 " in line and procs[0].address not in line, line
    finally:
        _stop(procs)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_two_thousand_idle_connections_beside_an_mwms_job(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    secret = {"DISTRIB_JOB_SECRET": "flooded-job"}
    procs = _start(tmp_path, "mwms", 2, {0: secret, 1: secret}, nofile={0: 1024})
    idle: List[socket.socket] = []
    try:
        _wait_for(lambda: all((tmp_path / f"ready.{i}").exists() for i in range(2)), 240, "rendezvous")
        host, port = procs[0].address.rsplit(":", 1)
        for _ in range(2000):
            idle.append(socket.create_connection((host, int(port)), timeout=10))
        (tmp_path / "attacked").write_text("1")
        for proc in procs:
            proc.wait(timeout=240)
        outputs = [(tmp_path / f"task{i}.log").read_text() for i in range(2)]
        assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outputs)
        assert all("RESULT" in o for o in outputs)
        assert "too many open files" not in outputs[0].lower()
    finally:
        for sock in idle:
            sock.close()
        _stop(procs)


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_stalled_and_huge_unauthenticated_calls_beside_a_ps_job(tmp_path):
    import grpc

    from ps_task_harness import cluster_starter
    from distrib.strategies.parameter_server.transport import METHOD

    release = threading.Event()

    def stalled():
        release.wait(300)  # announces a call and never sends its message
        yield b""

    with cluster_starter(tmp_path, HERE, wait=240.0) as start:
        cluster = start("ps_flood", workers=1, ps=1)
        cluster.wait_for_marker("ready")
        ports = json.loads((tmp_path / "ports.json").read_text())
        channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for port in ports]
        try:
            stalls = [ch.stream_unary(METHOD).future(stalled(), timeout=300,
                                                      metadata=(("x-distrib-auth", "1.2.3.4.5"),))
                      for ch in channels for _ in range(32)]
            ps_pid = cluster.procs["ps 0"].pid
            huge = b"\0" * (1 << 30)
            for channel in channels[1:]:  # the worker's and the ps's ports
                with pytest.raises(grpc.RpcError) as refused:
                    channel.unary_unary(METHOD)(huge, timeout=120)
                assert refused.value.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE)
            del huge
            assert _peak_rss_mib(ps_pid) < 1024  # the 1 GiB was never read into the ps
            (tmp_path / "attacked").write_text("1")
            assert cluster.wait("chief") == 0, cluster.dump()
            result = cluster.result()
            assert result["last"] < 0.1 * result["first"], result
            assert all(f.exception(timeout=30).code() == grpc.StatusCode.UNAUTHENTICATED for f in stalls)
        finally:
            release.set()
            for channel in channels:
                channel.close()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))
    {"mwms": scenario_mwms, "ps_flood": scenario_ps_flood}[sys.argv[1]]()
