"""The collective interface holds operations only; what an elastic collective adds is its own interfaces.

`Collective` is the operations every strategy talks through; the elastic
abilities (step marks, resize listeners, snapshots, replay) are
`ElasticAbilities`, the reduced-bucket log is `ReductionLog`, both checked
with ``isinstance``; `ElasticCollective` holds its parts (membership,
reductions in flight, snapshots, log), each built with an explicit
constructor; the gradient synchroniser of a plain collective never reaches
for a log.
"""
from __future__ import annotations

import inspect

import torch

from distrib.comm.collective import Collective, LocalCollective
from distrib.comm.elastic.collective import ElasticCollective
from distrib.comm.elastic.inflight import InFlight
from distrib.comm.elastic.membership import Membership
from distrib.comm.elastic.snapshots import Snapshots
from distrib.comm.elastic_abilities import ElasticAbilities, ReductionLog, elastic_abilities
from distrib.comm.grad_sync import GradientSynchronizer
from distrib.comm.torch_collective import TorchCollective
from distrib.testing.simulated import ThreadCollective, _Group

#: What every collective does: identity, the operations, and closing.
_OPERATIONS = {"rank", "world_size", "distributed", "all_reduce", "broadcast", "all_gather", "barrier", "step_flag",
               "all_reduce_async", "wait", "control_all_reduce", "agree_any", "control_broadcast",
               "control_all_gather", "broadcast_bytes", "broadcast_json", "all_gather_json", "closed", "shutdown",
               # a flag, and the one hook the input pipeline (distrib.data, another issue's) still calls on every
               # collective: a no-op unless elastic
               "elastic", "apply_pending_resize"}


def _public(cls: type) -> set:
    return {n for n in dir(cls) if not n.startswith("_")}


def test_the_collective_interface_is_its_operations_and_the_elastic_abilities_are_their_own():
    assert _public(Collective) == _OPERATIONS
    abilities = _public(ElasticAbilities) - {"elastic"}
    assert abilities >= {"keep_snapshot", "take_snapshot", "snapshot_restored", "snapshot_wanted",
                         "add_snapshot_listener", "add_resize_listener", "remove_resize_listener",
                         "replaying_before_it_joined", "step_boundary", "step_end"}
    assert not (abilities - {"apply_pending_resize"}) & _public(Collective)
    assert not _public(ReductionLog) & _public(Collective)


def test_only_the_elastic_collective_has_the_abilities_and_the_log():
    assert issubclass(ElasticCollective, ElasticAbilities) and issubclass(ElasticCollective, ReductionLog)
    for plain in (LocalCollective, TorchCollective, ThreadCollective):
        assert not issubclass(plain, (ElasticAbilities, ReductionLog)), plain
    assert elastic_abilities(LocalCollective()) is None and elastic_abilities(None) is None
    assert not ElasticCollective.__abstractmethods__  # every ability is implemented


def test_the_elastic_collective_holds_parts_built_with_explicit_constructors():
    for part in (Membership, InFlight, Snapshots):
        params = list(inspect.signature(part.__init__).parameters)[1:]
        assert params, f"{part.__name__} takes what it needs in its constructor"
        assert not issubclass(ElasticCollective, part), f"{part.__name__} is held, not inherited"


class _RecordingCollective(ThreadCollective):
    """A plain collective that records which of its public names the synchroniser reads."""

    def __init__(self, group, rank):
        super().__init__(group, rank)
        self.read = []

    def __getattribute__(self, name):
        if not name.startswith("_") and name != "read":
            object.__getattribute__(self, "read").append(name)
        return object.__getattribute__(self, name)


def test_a_plain_collective_s_gradient_buckets_never_reach_for_a_log():
    collective = _RecordingCollective(_Group(1, 5.0), 0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    sync = GradientSynchronizer(collective)
    sync.add_parameters(list(model.parameters()))
    collective.read.clear()
    for _ in range(2):
        model(torch.randn(3, 4)).pow(2).sum().backward()
        sync.finish()
        model.zero_grad(set_to_none=True)
    assert not {"keeps_results", "keeps", "all_reduce_logged"} & set(collective.read), collective.read
    assert {"all_reduce_async", "wait"} <= set(collective.read)
    assert collective.read.count("all_reduce_async") == 2  # one bucket a step, launched once
