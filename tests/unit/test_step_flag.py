"""The preemption flag rides in the gradient all-reduce: agreed on every replica, no message of its own.

Replicas are threads over `distrib.testing.simulated` (a real thread
collective that counts its calls), so the tests can count the messages a
step sends and check that every replica reaches the same decision.
"""
from __future__ import annotations

import threading

import torch

from distrib.checkpoint.preemption import PreemptionWatcher
from distrib.comm.grad_sync import GradientSynchronizer
from distrib.comm.step_flag import StepFlag
from distrib.strategies.checkpoint_role import CheckpointRole
from distrib.testing.simulated import run_workers

REPLICAS = 2
_init_lock = threading.Lock()


def _model() -> torch.nn.Module:
    with _init_lock:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def _step(model: torch.nn.Module, sync: GradientSynchronizer, rank: int, step: int) -> None:
    g = torch.Generator().manual_seed(10 * rank + step)
    model(torch.randn(3, 4, generator=g)).pow(2).sum().backward()
    sync.finish()
    for p in model.parameters():
        p.grad = None


def _role(strategy) -> CheckpointRole:
    """What the watcher needs of a strategy: its collective (the checkpoint-role contract)."""
    return CheckpointRole(is_chief=strategy.replica_id == 0, num_replicas_in_sync=REPLICAS,
                          replica_id=strategy.replica_id, collective=strategy.collective)


def _messages(collective) -> int:
    return sum(collective.calls.values())


def test_a_signal_on_one_replica_is_agreed_on_every_replica_without_an_extra_message():
    """Worker 1 is signalled before step 3: both agree at step 3, and steps 1-5 send only gradients."""
    def replica(strategy):
        collective = strategy.collective
        model = _model()
        sync = GradientSynchronizer(collective)
        sync.add_parameters(list(model.parameters()))
        watcher = PreemptionWatcher()  # not installed (a thread): trigger() stands in for SIGTERM
        decisions, extra = [], []
        _step(model, sync, strategy.replica_id, 0)
        decisions.append(watcher.agreed(_role(strategy)))  # first check: attaches, one control message
        for step in range(1, 6):
            if step == 3 and strategy.replica_id == 1:
                watcher.trigger()
            _step(model, sync, strategy.replica_id, step)
            before = _messages(collective)
            decisions.append(watcher.agreed(_role(strategy)))
            extra.append(_messages(collective) - before)
        return decisions, extra

    results = run_workers(replica, REPLICAS)
    for decisions, extra in results:
        assert decisions == [False, False, False, True, True, True]
        assert extra == [0] * 5  # the checks after steps 1-5 sent nothing
    assert results[0] == results[1]


def test_without_a_gradient_reduction_the_check_falls_back_to_one_control_message():
    def replica(strategy):
        watcher = PreemptionWatcher()
        if strategy.replica_id == 0:
            watcher.trigger()
        answers = []
        for _ in range(2):
            before = _messages(strategy.collective)
            answers.append((watcher.agreed(_role(strategy)), _messages(strategy.collective) - before))
        return answers

    for answers in run_workers(replica, REPLICAS):
        assert answers == [(True, 1), (True, 1)]


def test_values_delivered_before_a_take_are_or_ed_and_taken_once():
    flag = StepFlag()
    assert flag.take() is None
    flag.deliver(torch.tensor([1.0]))
    flag.deliver(torch.tensor([0.0]))  # a later step of the same execution
    assert flag.take() is True
    assert flag.take() is None


def test_delivering_reads_nothing_on_the_host_and_keeps_its_own_copy():
    from distrib.testing.host_reads import HostReads

    flag, summed = StepFlag(), torch.tensor([1.0])
    with HostReads() as reads:
        flag.deliver(summed)
    summed.fill_(0.0)  # the bucket is reused by the next step
    assert reads.count == 0
    assert flag.take() is True


def test_a_lagged_flag_answers_from_the_reduction_before_the_newest():
    """On a GPU `take` must not wait for the step just queued: it answers one reduction late."""
    flag = StepFlag(lagged=True)
    answers = []
    for value in [0.0, 0.0, 1.0, 0.0, 0.0]:
        flag.deliver(torch.tensor([value]))
        answers.append(flag.take())
    assert answers == [None, False, False, True, False]
    flag.deliver(torch.tensor([1.0]))
    flag.discard()  # a consumer attaching now: nothing earlier counts
    flag.deliver(torch.tensor([0.0]))
    assert flag.take() is None


def test_a_lagged_signal_is_agreed_one_step_later_on_every_replica():
    def replica(strategy):
        collective = strategy.collective
        collective._step_flag = StepFlag(lagged=True)  # what a GPU collective's flag does
        model = _model()
        sync = GradientSynchronizer(collective)
        sync.add_parameters(list(model.parameters()))
        watcher = PreemptionWatcher()
        decisions = []
        _step(model, sync, strategy.replica_id, 0)
        decisions.append(watcher.agreed(_role(strategy)))
        for step in range(1, 6):
            if step == 3 and strategy.replica_id == 1:
                watcher.trigger()
            _step(model, sync, strategy.replica_id, step)
            decisions.append(watcher.agreed(_role(strategy)))
        return decisions

    results = run_workers(replica, REPLICAS)
    assert results[0] == results[1]
    assert results[0] == [False, False, False, False, True, True]


def test_a_removed_source_no_longer_counts():
    flag = StepFlag()
    raised = threading.Event()
    raised.set()
    flag.add_source(raised.is_set)
    assert flag.local_value() == 1.0
    flag.remove_source(raised.is_set)
    assert flag.local_value() == 0.0
