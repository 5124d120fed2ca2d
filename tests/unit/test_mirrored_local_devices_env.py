"""``MirroredStrategy()`` with no devices reads ``DISTRIB_LOCAL_DEVICES`` (how a tutorial's unchanged line gets 2 CPU replicas).

The 2-replica run itself is tests/distributed/test_tutorial_custom_training_port.py.
"""
import pytest

import distrib
from distrib.strategies import devices


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)


def test_no_devices_reads_the_env(two_cores, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("DISTRIB_LOCAL_DEVICES", "cpu:0, cpu:9")
    with pytest.raises(ValueError, match=r"device 'cpu:9' does not exist"):
        distrib.MirroredStrategy()


def test_explicit_devices_win_over_the_env(two_cores, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("DISTRIB_LOCAL_DEVICES", "cpu:0,cpu:9")
    assert distrib.MirroredStrategy(["cpu:0"]).num_replicas_in_sync == 1


def test_empty_env_keeps_the_default(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("DISTRIB_LOCAL_DEVICES", " ")
    assert distrib.MirroredStrategy().num_replicas_in_sync == 1
