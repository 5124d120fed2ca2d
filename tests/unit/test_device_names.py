"""Item 17.6: a device that does not exist is an error naming it and what exists."""
import pytest
import torch

import distrib
from distrib.strategies import devices
from distrib.strategies.devices import parse_device, parse_replica_devices


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)


@pytest.fixture
def one_fake_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_cpu_replica_names_up_to_the_core_count_are_kept(two_cores):
    assert parse_replica_devices(["cpu:0", "/cpu:1"]) == (["cpu:0", "cpu:1"], [torch.device("cpu")] * 2)
    assert parse_device("cpu:1") == torch.device("cpu")


def test_two_cpu_replicas_exist_even_on_one_core(monkeypatch):
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert parse_replica_devices(["cpu:0", "cpu:1"])[0] == ["cpu:0", "cpu:1"]


@pytest.mark.parametrize("make", [
    lambda: distrib.OneDeviceStrategy("cpu:7"),
    lambda: distrib.OneDeviceStrategy(torch.device("cpu", 7)),
    lambda: parse_replica_devices(["cpu:0", "cpu:7"]),
    lambda: distrib.MirroredStrategy(["cpu:0", "cpu:7"]),
    lambda: distrib.MultiWorkerMirroredStrategy(local_devices=["cpu:7"]),
])
def test_cpu_index_beyond_the_cores_is_refused(two_cores, make):
    with pytest.raises(ValueError, match=r"device 'cpu:7' does not exist: .* cpu:0\.\.cpu:1 here"):
        make()


def test_gpu_index_beyond_the_visible_gpus_is_refused(one_fake_gpu, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    for spec in ("cuda:3", "/gpu:3", torch.device("cuda", 3)):
        with pytest.raises(ValueError, match=r"'cuda:3'|'/gpu:3'") as err:
            parse_device(spec)
        assert "torch sees 1 GPU here (cuda:0..cuda:0, CUDA_VISIBLE_DEVICES=2)" in str(err.value)
    assert parse_device("cuda:0") == torch.device("cuda", 0)


def test_local_devices_env_is_checked_too(two_cores, monkeypatch):
    monkeypatch.setenv("DISTRIB_LOCAL_DEVICES", "cpu:0,cpu:9")
    with pytest.raises(ValueError, match="device 'cpu:9' does not exist"):
        distrib.MultiWorkerMirroredStrategy()


# Issue 39, item 3: TF's device spellings keep their index.
@pytest.mark.parametrize("names", [
    ["/device:CPU:0", "/device:CPU:1"],
    ["/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"],
    ["device:CPU:0", "/CPU:1"],
])
def test_tf_device_names_keep_their_index(two_cores, names):
    assert parse_replica_devices(names) == (["cpu:0", "cpu:1"], [torch.device("cpu")] * 2)


def test_tf_gpu_names_keep_their_index(one_fake_gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert parse_device("/device:GPU:1") == torch.device("cuda", 1)
    assert parse_device("/job:localhost/replica:0/task:0/device:GPU:1") == torch.device("cuda", 1)
    assert parse_replica_devices(["/device:GPU:0", "/device:GPU:1"])[0] == ["cuda:0", "cuda:1"]


def test_a_full_name_of_another_task_is_refused_by_name(two_cores):
    with pytest.raises(ValueError, match=r"names 'task:1': a strategy takes this process's devices"):
        parse_replica_devices(["/job:localhost/replica:0/task:1/device:CPU:0"])


def test_a_full_tf_device_index_beyond_the_cores_is_refused(two_cores):
    with pytest.raises(ValueError, match=r"device '/device:CPU:7' does not exist"):
        distrib.MirroredStrategy(["/device:CPU:0", "/device:CPU:7"])
