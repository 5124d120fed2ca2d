"""Item 17.4: connections made at start-up retry with backoff within the start-up timeout, and
a failure names the task and the address."""
import pytest
import torch.distributed as dist

from distrib.comm import health
from distrib.comm.auth_store import host_store
from distrib.comm.errors import RendezvousTimeoutError
from distrib.comm.health import HealthMonitor
from distrib.process.ports import free_port


def describe(rank):
    return f"worker {rank} (127.0.0.1:{1000 + rank})"


def test_heartbeat_connection_survives_refused_attempts(monkeypatch):
    port = free_port()
    master = host_store("127.0.0.1", port, 2, 10)  # the chief's store, as the job hosts it
    real, refusals = health.store_client, []

    def flaky_client(*args, **kwargs):
        if len(refusals) < 3:  # what a starved chief's full accept queue looks like
            refusals.append(1)
            raise dist.DistNetworkError("Connection refused")
        return real(*args, **kwargs)

    monkeypatch.setattr(health, "store_client", flaky_client)
    monitor = HealthMonitor("127.0.0.1", port, 1, 2, 10, describe, namespace="distrib/attempt/x")
    try:
        assert len(refusals) == 3
        master.set("distrib/attempt/x/probe", "1")
        assert monitor._store.get("probe") == b"1"  # the namespace is applied
    finally:
        monitor.close()
        monitor.release()


def test_heartbeat_connection_failure_names_the_task_and_address():
    port = free_port()  # nobody listens there
    with pytest.raises(RendezvousTimeoutError) as err:
        HealthMonitor("127.0.0.1", port, 1, 2, 0.5, describe)
    text = str(err.value)
    assert text.startswith("worker 1 (127.0.0.1:1001) could not open its heartbeat connection")
    assert f"127.0.0.1:{port}" in text and "within 0.5s" in text
