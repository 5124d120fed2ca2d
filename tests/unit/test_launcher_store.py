"""The launcher of an elastic job hosts the job's store at the chief's address, so it outlives the chief."""
from __future__ import annotations

import pytest

from distrib.comm.auth_store import AuthStore
from distrib.launch.job_store import LauncherStore, chief_address
from distrib.launch.layout import TaskSpec
from distrib.process.ports import reserve_ports

SECRET = {"DISTRIB_JOB_SECRET": "launcher-store-test"}


def _cluster(port, host="127.0.0.1"):
    return {"worker": [f"{host}:{port}", f"{host}:{port + 1}"]}


def test_the_launcher_that_runs_the_chief_serves_the_store_at_the_chief_s_address():
    port = reserve_ports(1)[0]
    tasks = [TaskSpec("worker", 0), TaskSpec("worker", 1)]
    store = LauncherStore.host(tasks, _cluster(port), SECRET)
    assert store is not None and store.address == f"127.0.0.1:{port}"
    try:
        assert store.environment({"A": "1"}) == {"A": "1", "DISTRIB_LAUNCHER_STORE": "1"}
        client = AuthStore("127.0.0.1", port, b"launcher-store-test", timeout=5.0)
        client.set("k", "v")
        assert AuthStore("127.0.0.1", port, b"launcher-store-test", timeout=5.0).get("k") == b"v"
    finally:
        store.close()


def test_a_node_without_the_chief_or_a_job_without_a_secret_hosts_nothing():
    port = reserve_ports(1)[0]
    assert LauncherStore.host([TaskSpec("worker", 1)], _cluster(port), SECRET) is None
    # beyond loopback and no secret: the chief hosts its (unauthenticated) store as before
    assert LauncherStore.host([TaskSpec("worker", 0)], _cluster(port, "10.255.0.1"), {}) is None


@pytest.mark.parametrize("cluster,expected", [({"worker": ["h:1", "h:2"]}, "h:1"),
                                              ({"chief": ["c:9"], "worker": ["h:1"]}, "c:9"),
                                              ({"worker": ["[::1]:7"]}, "[::1]:7")])
def test_the_chief_is_the_chief_task_else_worker_0(cluster, expected):
    assert chief_address(cluster) == expected
