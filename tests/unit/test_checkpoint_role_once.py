"""The checkpoint role is resolved once per public save or restore, then passed down (issue 43, item 5).

Every lookup ends in `Strategy.checkpoint_role()` (`resolve_role` with a
strategy, `job_role`, the callbacks); a `CheckpointRole` handed down is not a
lookup. The counting wrapper below is installed on the class, so every
strategy's lookups are counted.
"""
from __future__ import annotations

import os
import warnings

import pytest
import torch

import distrib
from distrib.checkpoint.checkpoint import Checkpoint
from distrib.checkpoint.manager import CheckpointManager
from distrib.checkpoint.options import CheckpointOptions
from distrib.checkpoint.replica_state import ReplicaState
from distrib.checkpoint.rng import RNGState
from distrib.checkpoint.variable import Variable
from distrib.comm.collective import LocalCollective
from distrib.strategies.checkpoint_role import CheckpointRole
from distrib.strategies.default import get_strategy
from distrib.strategies.interface import Strategy


@pytest.fixture
def lookups(monkeypatch):
    """``lookups()`` returns the number of role lookups since the last call."""
    calls = []
    original = Strategy.checkpoint_role

    def counting(self):
        calls.append(self)
        return original(self)

    monkeypatch.setattr(Strategy, "checkpoint_role", counting)

    def taken() -> int:
        n = len(calls)
        calls.clear()
        return n

    return taken


def _model() -> "distrib.Model":
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(2, 1)))
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_a_plain_checkpoint_looks_up_its_role_once_per_call(tmp_path, lookups):
    ckpt = Checkpoint(weight=torch.arange(3.0), step=Variable(0))
    lookups()
    path = ckpt.save(str(tmp_path / "ckpt"))
    assert lookups() == 1
    ckpt.write(str(tmp_path / "exact"))
    assert lookups() == 1
    ckpt.restore(path).assert_consumed()
    assert lookups() == 1
    ckpt.read(path)
    assert lookups() == 1


def test_objects_that_gather_take_the_operations_role(tmp_path, lookups):
    """An `RNGState`, a `ReplicaState` and a nested Checkpoint's add no lookup of their own."""
    model = _model()
    inner = Checkpoint(rng=RNGState())
    ckpt = Checkpoint(rng=RNGState(), replicas=ReplicaState(model, get_strategy()), inner=inner)
    lookups()
    path = ckpt.save(str(tmp_path / "ckpt"))
    assert lookups() == 1
    ckpt.restore(path).assert_consumed()
    assert lookups() == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ckpt.load_state_dict(ckpt.state_dict())  # the plain protocol: each object resolves its own
    assert lookups() == 2 * 3


def test_a_manager_looks_up_its_role_once_per_save_and_restore(tmp_path, lookups):
    manager = CheckpointManager(Checkpoint(weight=torch.zeros(2), rng=RNGState()), str(tmp_path), max_to_keep=2)
    assert lookups() == 1  # creating it: the chief lists the directory
    manager.save()
    assert lookups() == 1
    manager.save(options=CheckpointOptions(enable_async=True))
    assert lookups() == 1
    manager.sync()  # publishes the background save: its own public call
    assert lookups() == 1
    manager.sync()  # nothing in flight: no role needed
    assert lookups() == 0
    assert manager.restore_or_initialize() == manager.latest_checkpoint
    assert lookups() == 1


def test_model_saving_looks_up_its_role_once(tmp_path, lookups):
    model = _model()
    lookups()
    model.save_weights(str(tmp_path / "weights"))
    assert lookups() == 1
    with pytest.raises(FileExistsError, match="save_weights: .* exists"):
        model.save_weights(str(tmp_path / "weights"), overwrite=False)
    assert lookups() == 1
    model.save(str(tmp_path / "model"))
    assert lookups() == 1
    model.load_weights(str(tmp_path / "weights"))  # every worker reads: no role needed
    assert lookups() == 0


def test_a_role_given_instead_of_a_strategy_is_no_lookup(tmp_path, lookups):
    role = get_strategy().checkpoint_role()
    lookups()
    state = RNGState(role).state_dict()
    RNGState(role).load_state_dict(state)
    target = str(tmp_path / "w")
    assert distrib.checkpoint.write_path_for(target, role) == target
    assert lookups() == 0
    assert os.listdir(tmp_path) == []


def test_a_role_handed_down_by_keyword_is_no_lookup_and_is_the_one_used(tmp_path, lookups):
    """Every operation that takes a role takes it as ``role=`` (issue 51: no `_for(role)` twins)."""
    role = get_strategy().checkpoint_role()
    model = _model()
    ckpt = Checkpoint(rng=RNGState(), replicas=ReplicaState(model, get_strategy()), step=Variable(3))
    manager = CheckpointManager(ckpt, str(tmp_path / "managed"), max_to_keep=1)
    lookups()
    path = ckpt.write(str(tmp_path / "exact"), role=role)
    assert ckpt.restore(path, role=role).path == path
    ckpt.read(path, role=role).assert_consumed()
    ckpt.load_state_dict(ckpt.state_dict(role=role), role=role)
    RNGState().load_state_dict(RNGState().state_dict(role=role), role=role)
    manager.sync(role=role)
    manager.keep_snapshot(role=role)
    assert lookups() == 0
    # the role handed down decides who writes: a non-chief's files go to its private temporary directory
    other = CheckpointRole(is_chief=False, num_replicas_in_sync=1, replica_id=1, collective=LocalCollective(),
                           task_type="worker", task_id=1)
    target = str(tmp_path / "not-the-chief")
    assert ckpt.write(target, role=other) == target
    assert lookups() == 0
    assert not os.path.exists(target)
    with pytest.raises(TypeError):
        ckpt.write(str(tmp_path / "positional"), None, None, role)  # the role is keyword-only
