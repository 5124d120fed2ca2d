"""Under NCCL distrib names the task's GPU to ``init_process_group`` (``device_id``), as torch 2.15's
NCCL engine wants; gloo never gets it, and a torch without the parameter is not given it (issue 50)."""
from __future__ import annotations

import inspect

import pytest
import torch
import torch.distributed as dist

from distrib.comm import process_group
from distrib.comm.process_group import device_id_for, init_process_group


class Spy:
    """Records each ``init_process_group`` call instead of making a group."""

    def __init__(self, with_device_id: bool = True) -> None:
        self.calls: list = []
        self.with_device_id = with_device_id

    def __call__(self, backend, **kwargs):
        self.calls.append((backend, kwargs))

    @property
    def __signature__(self):
        params = [inspect.Parameter("backend", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                  inspect.Parameter("store", inspect.Parameter.KEYWORD_ONLY, default=None)]
        if self.with_device_id:
            params.append(inspect.Parameter("device_id", inspect.Parameter.KEYWORD_ONLY, default=None))
        return inspect.Signature(params)


def test_this_torch_takes_device_id():  # torch >= 2.3, the floor
    assert "device_id" in inspect.signature(dist.init_process_group).parameters


def test_nccl_gets_the_tasks_gpu(monkeypatch):
    spy = Spy()
    monkeypatch.setattr(dist, "init_process_group", spy)
    init_process_group("nccl", torch.device("cuda", 1), store="s", rank=1, world_size=2)
    assert spy.calls == [("nccl", {"store": "s", "rank": 1, "world_size": 2, "device_id": torch.device("cuda", 1)})]


def test_nccl_without_a_device_gets_the_current_cuda_device(monkeypatch):
    spy = Spy()
    monkeypatch.setattr(dist, "init_process_group", spy)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    init_process_group("nccl", None, rank=0, world_size=1)  # as the elastic rebuild calls it
    assert spy.calls[0][1]["device_id"] == torch.device("cuda", 3)
    assert device_id_for("nccl", torch.device("cuda")) == torch.device("cuda", 3)


@pytest.mark.parametrize("device", [None, torch.device("cpu"), torch.device("cuda", 0)])
def test_gloo_never_gets_a_device_id(monkeypatch, device):
    spy = Spy()
    monkeypatch.setattr(dist, "init_process_group", spy)
    init_process_group("gloo", device, rank=0, world_size=1)
    assert spy.calls == [("gloo", {"rank": 0, "world_size": 1})]


def test_a_torch_without_the_parameter_is_not_given_it(monkeypatch):
    spy = Spy(with_device_id=False)
    monkeypatch.setattr(dist, "init_process_group", spy)
    init_process_group("nccl", torch.device("cuda", 0), rank=0, world_size=1)
    assert spy.calls == [("nccl", {"rank": 0, "world_size": 1})]


def test_both_places_that_make_process_groups_go_through_it():
    """TorchCollective.connect and the elastic rebuild: no direct ``dist.init_process_group`` left."""
    import pathlib

    import distrib

    src = pathlib.Path(distrib.__file__).resolve().parent
    direct = [p.relative_to(src).as_posix() for p in src.rglob("*.py")
              if "dist.init_process_group(" in p.read_text(encoding="utf-8")]
    assert direct == ["comm/process_group.py"]
    assert process_group.__all__ == ["init_process_group", "device_id_for"]


def test_torch_collective_connect_passes_its_device_under_nccl(monkeypatch):
    """A one-task job that agreed on NCCL: connect names the task's GPU. No group is made (this test
    has no GPU, and a group another test left in this process stays untouched): torch.distributed's
    group calls are stood in for; the rendezvous store and the health monitor are real."""
    from distrib.cluster.simple import SimpleClusterResolver
    from distrib.comm import torch_collective
    from distrib.comm.options import CommunicationOptions
    from distrib.process.ports import free_port

    seen: list = []

    def spy(backend, device_id=None, **kwargs):
        seen.append((backend, device_id))

    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", spy)
    monkeypatch.setattr(dist, "new_group", lambda *args, **kwargs: "control group")
    monkeypatch.setattr(torch_collective, "choose_backend", lambda *args, **kwargs: "nccl")
    resolver = SimpleClusterResolver({"worker": [f"127.0.0.1:{free_port()}"]}, task_type="worker", task_id=0)
    collective = torch_collective.TorchCollective.connect(resolver, CommunicationOptions(timeout_seconds=20),
                                                          torch.device("cuda", 2))
    try:
        assert seen == [("nccl", torch.device("cuda", 2))]
        assert collective.backend == "nccl"
    finally:
        collective.shutdown()
