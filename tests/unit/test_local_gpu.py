"""Item 17.2: which GPU a task drives, and the check that no two tasks share one under NCCL."""
import json

import pytest
import torch
import torch.distributed as dist

from distrib.cluster import ClusterSpec, SimpleClusterResolver
from distrib.comm.gpu_sharing import GpuSharingError, choose_backend, find_shared_gpu, physical_gpu
from distrib.strategies.local_replicas.local_gpu import local_task_index, select_local_gpu

TWO_HOSTS = {"worker": ["host-a:2222", "host-a:2223", "host-b:2222", "host-a:2224"]}


def resolver(cluster, task_type, task_id):
    return SimpleClusterResolver(ClusterSpec(cluster), task_type=task_type, task_id=task_id)


@pytest.fixture
def two_fake_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.mark.parametrize("task_id, index", [(0, 0), (1, 1), (2, 0), (3, 2)])
def test_index_is_the_position_among_the_tasks_on_the_same_host(task_id, index):
    assert local_task_index(resolver(TWO_HOSTS, "worker", task_id), environ={}) == index


def test_chief_counts_first_on_its_host():
    cluster = {"chief": ["h:1"], "worker": ["h:2", "g:1", "h:3"]}
    assert [local_task_index(resolver(cluster, "worker", i), environ={}) for i in range(3)] == [1, 0, 2]
    assert local_task_index(resolver(cluster, "chief", 0), environ={}) == 0


def test_launcher_variables_win_over_the_cluster_spec():
    r = resolver(TWO_HOSTS, "worker", 0)
    assert local_task_index(r, environ={"LOCAL_RANK": "3", "SLURM_LOCALID": "1"}) == 3
    assert local_task_index(r, environ={"SLURM_LOCALID": "1"}) == 1


def test_malformed_local_rank_names_the_variable():
    with pytest.raises(ValueError, match="LOCAL_RANK='x'"):
        local_task_index(resolver(TWO_HOSTS, "worker", 0), environ={"LOCAL_RANK": "x"})


def test_tasks_on_one_host_get_different_gpus(two_fake_gpus):
    picks = [select_local_gpu(resolver(TWO_HOSTS, "worker", i), environ={}) for i in range(4)]
    assert picks == [torch.device("cuda", i) for i in (0, 1, 0, 0)]  # worker 3 is the 3rd on host-a: wraps


def test_select_without_a_gpu_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA device"):
        select_local_gpu(resolver(TWO_HOSTS, "worker", 0), environ={})


def test_physical_gpu_follows_cuda_visible_devices():
    assert physical_gpu(torch.device("cuda", 1), {"CUDA_VISIBLE_DEVICES": "3,5"}) == "5"
    assert physical_gpu(torch.device("cuda", 0), {"CUDA_VISIBLE_DEVICES": "GPU-ab12"}) == "GPU-ab12"
    assert physical_gpu(torch.device("cuda", 1), {}) == "1"


def test_find_shared_gpu_names_the_first_clash():
    assert find_shared_gpu({0: ("a", "0"), 1: ("a", "1"), 2: ("b", "0")}) is None
    assert find_shared_gpu({0: ("a", "0"), 1: ("b", "0"), 2: ("a", "0")}) == (0, 2, "a", "0")


def _store_with_peer(peer_gpu):
    store = dist.HashStore()
    store.set("distrib/gpu/1", json.dumps(peer_gpu))
    return store


def describe(rank):
    return f"worker {rank} (h:{2222 + rank})"


def test_nccl_on_a_shared_gpu_stops_naming_both_tasks_the_gpu_and_the_fix(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "node-a")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    store = _store_with_peer(["node-a", "0"])
    with pytest.raises(GpuSharingError) as err:  # the peer never marks its read: 0.2 s, not 5, of waiting for it
        choose_backend(store, 0, 2, torch.device("cuda", 0), "nccl", False, 0.2, describe)
    text = str(err.value)
    assert "worker 0 (h:2222) and worker 1 (h:2223) would both use GPU 0 on host node-a" in text
    assert "CUDA_VISIBLE_DEVICES" in text and "RING" in text


class _RecordingStore:
    """A HashStore that remembers which keys were waited for."""

    def __init__(self, store):
        self.store, self.waited = store, []

    def set(self, key, value):
        self.store.set(key, value)

    def get(self, key):
        return self.store.get(key)

    def wait(self, keys, timeout):
        self.waited.extend(keys)
        self.store.wait(keys, timeout)


@pytest.mark.parametrize("peer_has_read", [True, False])
def test_task_0_keeps_the_store_until_every_task_has_read_the_clash(monkeypatch, peer_has_read):
    monkeypatch.setattr("socket.gethostname", lambda: "node-a")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    inner = _store_with_peer(["node-a", "0"])
    if peer_has_read:
        inner.set("distrib/gpu/read/1", "1")
    store = _RecordingStore(inner)
    with pytest.raises(GpuSharingError):  # a peer that never reads (dead) only delays the error
        choose_backend(store, 0, 2, torch.device("cuda", 0), "nccl", False, 0.2, describe)
    assert "distrib/gpu/read/1" in store.waited
    assert inner.get("distrib/gpu/read/0") == b"1"


def test_other_tasks_mark_their_read_and_do_not_wait(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "node-a")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    inner = dist.HashStore()
    inner.set("distrib/gpu/0", json.dumps(["node-a", "0"]))
    store = _RecordingStore(inner)
    with pytest.raises(GpuSharingError):
        choose_backend(store, 1, 2, torch.device("cuda", 0), "nccl", False, 5, describe)
    assert inner.get("distrib/gpu/read/1") == b"1"
    assert not any(key.startswith("distrib/gpu/read/") for key in store.waited)


def test_auto_falls_back_to_gloo_and_says_so(monkeypatch, caplog):
    monkeypatch.setattr("socket.gethostname", lambda: "node-a")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    store = _store_with_peer(["node-a", "0"])
    with caplog.at_level("WARNING", logger="distrib.comm"):
        assert choose_backend(store, 0, 2, torch.device("cuda", 0), "nccl", True, 5, describe) == "gloo"
    assert "uses gloo instead" in caplog.text and "GPU 0 on host node-a" in caplog.text


def test_own_gpus_or_other_hosts_keep_nccl(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "node-a")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # each task was given its own GPU
    assert choose_backend(_store_with_peer(["node-a", "2"]), 0, 2, torch.device("cuda", 0),
                          "nccl", False, 5, describe) == "nccl"
    assert choose_backend(_store_with_peer(["node-b", "3"]), 0, 2, torch.device("cuda", 0),
                          "nccl", False, 5, describe) == "nccl"
