"""torch's lazy modules in a multi-replica scope (issue 39, item 2).

``LazyLinear``, ``LazyConv2d`` and ``LazyBatchNorm2d`` create their tensors at
their first forward. The scope used to broadcast them before they existed
(``Attempted to use an uninitialized parameter``); they now wait for that
forward and are broadcast, summed and averaged from then on. The owner here
records the broadcasts; `test_lazy_modules_multi_worker` trains them on 2 real
workers.
"""
from __future__ import annotations

import torch
from torch.nn.parameter import is_lazy

from distrib.comm.options import CommunicationOptions
from distrib.strategies.layer_patches.batch_norm import is_synchronized
from distrib.strategies.replication import ScopeTracker


class _Sync:
    state = None

    def __init__(self):
        self.params = []

    def add_parameters(self, params):
        self.params += params


class _RecordingCollective:
    world_size = 2
    distributed = True
    elastic = False

    def __init__(self):
        self.broadcasts = []

    def broadcast(self, tensor, src=0):
        self.broadcasts.append(tensor.numel())
        return tensor + 1.0  # "replica 0's values": visible in the layer after the broadcast

    def all_reduce(self, tensor, op):
        return tensor  # global-batch BatchNorm's sums: this replica's alone will do here


class _Owner:
    def __init__(self):
        self.device = self.comm_device = torch.device("cpu")
        self.collective = _RecordingCollective()
        self.communication_options = CommunicationOptions()
        self.num_replicas_in_sync, self.replica_id = 2, 1
        self.multi_replica = True
        self.sync = _Sync()

    def _gradient_synchronizer(self):
        return self.sync


def _lazy_model():
    return torch.nn.Sequential(torch.nn.LazyConv2d(4, 3), torch.nn.LazyBatchNorm2d(), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.LazyLinear(2))


def test_lazy_tensors_are_broadcast_at_the_forward_that_creates_them():
    owner = _Owner()
    tracker = ScopeTracker(owner)
    with tracker.scope():
        model = _lazy_model()
    assert owner.collective.broadcasts == [1]       # only BatchNorm's num_batches_tracked exists yet
    torch.manual_seed(3)
    x = torch.randn(2, 1, 6, 6)
    seen = {}
    model[4].register_forward_hook(lambda m, a, out: seen.setdefault("weight", m.weight.detach().clone()))
    model(x)
    assert not any(is_lazy(t) for t in [*model.parameters(), *model.buffers()])
    conv, bn, linear = model[0], model[1], model[4]
    assert {id(p) for p in owner.sync.params} == {id(p) for p in model.parameters()}
    assert len(owner.collective.broadcasts) == 4    # then one per lazy layer, in forward order
    assert torch.equal(seen["weight"], linear.weight.detach())   # the layer computed with the broadcast weights
    assert torch.all(bn.running_var >= 1.0)         # broadcast (+1) before the forward updated it
    assert is_synchronized(bn)
    model(x)
    assert len(owner.collective.broadcasts) == 4    # nothing more to broadcast
    assert conv.weight.shape == (4, 1, 3, 3)


def test_a_lazy_model_adopted_with_track_module_waits_too():
    owner = _Owner()
    tracker = ScopeTracker(owner)
    model = tracker.track_module(_lazy_model())
    tracker.synchronize()
    model(torch.randn(2, 1, 6, 6))
    assert {id(p) for p in owner.sync.params} == {id(p) for p in model.parameters()}


def test_a_lazy_model_built_by_a_dry_run_in_the_scope():
    owner = _Owner()
    tracker = ScopeTracker(owner)
    with tracker.scope():
        model = _lazy_model()
        model(torch.randn(2, 1, 6, 6))                # Keras's "build" inside the scope
    assert {id(p) for p in owner.sync.params} == {id(p) for p in model.parameters()}


def test_on_a_device_strategy_lazy_tensors_move_there_once_created():
    """One replica on another device ("meta" stands in for a GPU): created on the CPU, then moved."""
    from distrib.comm.collective import LocalCollective

    class _DeviceOwner:
        device = torch.device("meta")
        collective = LocalCollective()
        communication_options = CommunicationOptions()

    tracker = ScopeTracker(_DeviceOwner())
    with tracker.scope():
        model = torch.nn.Sequential(torch.nn.LazyLinear(3), torch.nn.LazyBatchNorm1d())
    model(torch.zeros(2, 5, device="meta"))    # (a CUDA move keeps the parameter object; meta cannot)
    assert model[0].weight.device.type == "meta" and model[0].weight.shape == (3, 5)
    assert model[1].running_mean.device.type == "meta"
