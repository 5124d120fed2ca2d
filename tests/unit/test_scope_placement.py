"""A module built in a device strategy's scope starts with the weights the same seed gives on the CPU.

A constructor registers each parameter and then initialises it; moving it at
registration drew the initial weights from the device's generator, so a GPU
run and a CPU run of the same seeded program started from different models
(the cause of ``test_gpu``'s GPU-vs-CPU mismatch). The scope now moves what it
captured when first needed. The ``meta`` device stands in for a GPU here
(tensors with shapes and no values).
"""
from __future__ import annotations

import pytest
import torch

from distrib.comm.collective import LocalCollective
from distrib.comm.options import CommunicationOptions
from distrib.strategies.replication import ScopeTracker


class _Owner:
    """What a `ScopeTracker` needs of its strategy: a device, a collective, options."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.collective = LocalCollective()
        self.communication_options = CommunicationOptions()


def _build_in_scope(device):
    torch.manual_seed(0)
    expected = torch.nn.Linear(3, 2).weight.detach().clone()
    tracker = ScopeTracker(_Owner(device))
    torch.manual_seed(0)
    with tracker.scope():
        model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
        weight = model[0].weight
        assert torch.equal(weight.detach(), expected)  # the CPU generator's values
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, weight, optimizer, expected


def test_parameters_are_initialised_by_the_cpu_generator_then_moved():
    model, _, _, _ = _build_in_scope("meta")
    assert model[0].weight.device.type == "meta"
    assert model[1].running_mean.device.type == "meta"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_they_keep_their_identity_and_the_cpu_values():
    model, weight, optimizer, expected = _build_in_scope("cuda:0")
    assert model[0].weight is weight and weight.device.type == "cuda"
    assert optimizer.param_groups[0]["params"][0] is weight  # an optimizer made in the scope still steps it
    assert torch.equal(weight.detach().cpu(), expected)


def test_the_first_forward_inside_the_scope_moves_them():
    tracker = ScopeTracker(_Owner("meta"))
    with tracker.scope():
        model = torch.nn.Linear(3, 2)
        out = model(torch.empty(4, 3, device="meta"))
        assert model.weight.device.type == "meta" and out.shape == (4, 2)


def test_on_the_cpu_nothing_waits_for_a_move():
    tracker = ScopeTracker(_Owner("cpu"))
    with tracker.scope():
        torch.nn.Linear(3, 2)
        assert tracker._forward_hook is None  # no per-forward hook on a single CPU replica
