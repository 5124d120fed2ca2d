"""The Strategy interface, and the two contracts data and checkpoint code depend on.

Every strategy class implements the abstract `distrib.Strategy`; the input
layer needs only an `InputHost` and checkpoint code only a `CheckpointRole`:
the fakes below implement nothing else, so a passing test shows the contract
is the whole dependency.
"""
import inspect
import os
from typing import Any, List

import pytest
import torch

import distrib
from distrib.checkpoint.files import storage
from distrib.checkpoint.preemption import PreemptionWatcher
from distrib.checkpoint.rng import RNGState
from distrib.strategies.checkpoint_role import CheckpointRole
from distrib.comm.collective import Collective, LocalCollective, ReduceOp
from distrib.data import Dataset, InputBinding, InputContext, InputHost, InputPlacement
from distrib.data.distribution.distributed import distribute_dataset, distribute_from_function
from distrib.strategies import context
from distrib.strategies.base import ReplicatedStrategy
from distrib.strategies.central_storage import CentralStorageStrategy
from distrib.strategies.default import DefaultStrategy
from distrib.strategies.interface import Strategy
from distrib.strategies.mirrored import MirroredStrategy
from distrib.strategies.multi_worker import MultiWorkerMirroredStrategy
from distrib.strategies.one_device import OneDeviceStrategy
from distrib.strategies.parameter_server import ParameterServerStrategy

ALL = [DefaultStrategy, OneDeviceStrategy, MirroredStrategy, MultiWorkerMirroredStrategy,
       CentralStorageStrategy, ParameterServerStrategy]
REPLICATED = [DefaultStrategy, OneDeviceStrategy, MirroredStrategy, MultiWorkerMirroredStrategy]
INTERFACE = {"scope", "run", "reduce", "gather", "experimental_local_results", "experimental_distribute_dataset",
             "distribute_datasets_from_function", "num_replicas_in_sync", "cluster_resolver", "is_chief",
             "input_placement", "track_module", "replica_id", "device", "collective"}


# ------------------------------------------------------------------ interface
def test_the_public_strategy_is_the_abstract_interface():
    assert distrib.Strategy is Strategy
    assert inspect.isabstract(Strategy)
    assert set(Strategy.__abstractmethods__) == INTERFACE
    for concrete in ("extended", "should_checkpoint", "input_context", "checkpoint_role", "no_sync", "barrier"):
        assert hasattr(Strategy, concrete)
    with pytest.raises(TypeError):
        Strategy()


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_each_strategy_implements_every_abstract_member(cls):
    assert issubclass(cls, Strategy)
    assert not inspect.isabstract(cls), sorted(cls.__abstractmethods__)
    for name in INTERFACE:
        assert getattr(cls, name) is not getattr(Strategy, name), f"{cls.__name__} inherits abstract {name}"


def test_replicated_strategies_share_one_implementation_and_the_others_do_not():
    for cls in REPLICATED:
        assert cls.__mro__[1] is ReplicatedStrategy, cls
    for cls in (CentralStorageStrategy, ParameterServerStrategy):
        assert not issubclass(cls, ReplicatedStrategy) and cls.__mro__[1] is Strategy
    for cls in ALL:
        assert "tracks_modules" not in dir(cls) and "__new__" not in vars(cls)


def test_single_process_instances_are_strategies_with_consistent_contracts():
    made = [distrib.get_strategy(), DefaultStrategy(), OneDeviceStrategy("cpu"), MirroredStrategy(["cpu:0"]),
            MultiWorkerMirroredStrategy(), CentralStorageStrategy(["cpu:0", "cpu:1"])]
    for s in made:
        assert isinstance(s, distrib.Strategy) and isinstance(s, InputHost)
        role = s.checkpoint_role()
        assert (role.is_chief, role.num_replicas_in_sync, role.replica_id) == \
            (s.is_chief, s.num_replicas_in_sync, s.replica_id)
        assert s.extended is s and s.should_checkpoint == s.is_chief
    assert made[-1].input_context() == InputContext(1, 0, 2)


def test_default_strategy_is_not_a_singleton_but_get_strategy_returns_one_instance():
    assert DefaultStrategy() is not DefaultStrategy()
    assert distrib.get_strategy() is distrib.get_strategy()


# ------------------------------------------------------------ input contract
class _FakeInputHost:
    """Only what `InputHost` names: no strategy behind it."""

    def __init__(self, placement: InputPlacement) -> None:
        self.device = torch.device("cpu")
        self.collective = LocalCollective()
        self._placement = placement
        self.contexts: List[InputContext] = []

    def input_placement(self) -> InputPlacement:
        return self._placement

    def input_context(self) -> InputContext:
        ctx = self._placement.input_context()
        self.contexts.append(ctx)
        return ctx


def test_distributed_input_needs_only_an_input_host():
    host = _FakeInputHost(InputPlacement(num_input_pipelines=2, input_pipeline_id=1))
    assert isinstance(host, InputHost) and not isinstance(host, Strategy)
    batches = [b.tolist() for b in distribute_dataset(host, Dataset.range(8).batch(4))]
    assert batches == [[2, 3], [6, 7]]  # the second replica's half of each global batch


def test_dataset_functions_get_the_hosts_input_context():
    host = _FakeInputHost(InputPlacement(num_input_pipelines=3, input_pipeline_id=2))
    dist = distribute_from_function(host, lambda ctx: Dataset.range(9).shard(ctx.num_input_pipelines,
                                                                           ctx.input_pipeline_id).batch(2))
    assert host.contexts == [InputContext(3, 2, 3)]
    assert [b.tolist() for b in dist] == [[2, 5], [8]]


def test_an_input_binding_is_an_input_host_with_its_own_context():
    ctx = InputContext(1, 0, 4)
    binding = InputBinding(InputPlacement(), LocalCollective(), context=ctx)
    assert isinstance(binding, InputHost) and binding.input_context() is ctx
    seen = []
    dist = distribute_from_function(binding, lambda c: seen.append(c) or Dataset.range(3).batch(3))
    assert seen == [ctx] and [b.tolist() for b in dist] == [[0, 1, 2]]


# ------------------------------------------------------- checkpoint contract
class _TwoReplicas(Collective):
    """A fake collective for replica ``rank`` of 2: gathers see this replica twice; MAX sees ``peer_flag``."""

    def __init__(self, rank: int, peer_flag: float = 0.0) -> None:
        self._rank, self.peer_flag, self.calls = rank, peer_flag, []

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return 2

    def all_reduce(self, tensor, op=ReduceOp.SUM):
        self.calls.append("all_reduce")
        return torch.maximum(tensor, torch.full_like(tensor, self.peer_flag)) if op is ReduceOp.MAX else tensor * 2

    def broadcast(self, tensor, src=0):
        return tensor

    def all_gather(self, tensor):
        self.calls.append("all_gather")
        return [tensor.clone(), tensor.clone()]

    def barrier(self) -> None:
        self.calls.append("barrier")

    #: Replica 1's view of what the chief sends to its next JSON gathers, in order (a JSON gather
    #: otherwise sees this replica twice); on replica 0 the chief's decision pairs with the worker's None.
    peer_views: List[Any] = []

    def all_gather_json(self, obj):
        self.calls.append("all_gather")
        if self._rank == 0:
            return [obj, None if isinstance(obj, dict) and "value" in obj else obj]
        return [self.peer_views.pop(0) if self.peer_views else obj, obj]


def _role(rank: int, collective: Collective) -> CheckpointRole:
    return CheckpointRole(is_chief=rank == 0, num_replicas_in_sync=2, replica_id=rank, collective=collective,
                          task_type="worker", task_id=rank)


class _FakeStrategy:
    """Offers checkpoint code nothing but `checkpoint_role()`."""

    def __init__(self, role: CheckpointRole) -> None:
        self._role = role

    def checkpoint_role(self) -> CheckpointRole:
        return self._role


@pytest.mark.parametrize("rank", [0, 1])
def test_checkpoint_write_needs_only_a_checkpoint_role(tmp_path, rank):
    collective = _TwoReplicas(rank)
    fake = _FakeStrategy(_role(rank, collective))
    target = str(tmp_path / "ckpt-1")
    if rank == 1:   # the chief's gathers in a write: no error, then the path it wrote
        collective.peer_views = [None, {"value": target, "warnings": []}]
    context.push(fake)
    try:
        ckpt = distrib.train.Checkpoint(weight=torch.arange(3.0))
        assert ckpt.write(target) == target
    finally:
        context.pop(fake)
    assert "all_gather" in collective.calls  # the replicas agreed on the outcome
    assert storage.is_complete(target) == (rank == 0)  # only the chief writes the final path
    assert os.path.exists(target) == (rank == 0)


def test_write_paths_follow_the_role():
    chief, worker = _role(0, LocalCollective()), _role(1, LocalCollective())
    assert storage.write_path_for("/ckpts/c-3", chief) == "/ckpts/c-3"
    private = storage.write_path_for("/ckpts/c-3", worker)
    assert "distrib-workertemp-1-" in private and private.endswith("/c-3")
    storage.remove_write_path("/ckpts/c-3", private)
    assert worker.who == "worker:1" and CheckpointRole(True, 1, 3, LocalCollective()).who == "replica 3"


def test_rng_state_and_preemption_agreement_need_only_a_checkpoint_role():
    role = _role(1, _TwoReplicas(1, peer_flag=1.0))
    state = RNGState(role).state_dict()
    assert state["world_size"] == 2 and len(state["replicas"]) == 2
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    state = RNGState(role).state_dict()
    torch.rand(5)
    RNGState(role).load_state_dict(state)  # replica 1 takes its own saved state back
    assert torch.equal(torch.rand(3), expected)
    watcher = PreemptionWatcher()
    assert not watcher.received and watcher.agreed(role)  # the peer was signalled
