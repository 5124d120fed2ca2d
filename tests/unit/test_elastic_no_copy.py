"""Elastic training at (almost) no cost without a failure (issue 40), one process.

The membership vote rides in the step's last gradient bucket (no message of
its own); the log keeps a reduced gradient bucket itself instead of a copy,
and the synchronizer reduces the next step into another buffer while it does;
a program that changes a kept result in place is noticed and the log copies
from then on; the chief asks for a snapshot rarely, by its policy.
"""
from __future__ import annotations

import threading

import pytest
import torch

from distrib.comm.elastic.call_site import call_site
from distrib.comm.elastic_abilities import ReductionLog
from distrib.comm.elastic.oplog import OpLog
from distrib.comm.elastic.payload import decode_payload, encode_payload
from distrib.comm.elastic.resize import read_vote, vote_entries
from distrib.comm.elastic.snapshot_policy import LOG_FLOOR_BYTES, SnapshotPolicy
from distrib.comm.grad_sync import GradientSynchronizer
from distrib.comm.step_flag import StepFlag, StepRider
from distrib.testing.simulated import ThreadCollective, run_workers

_init_lock = threading.Lock()


def _model() -> torch.nn.Module:
    with _init_lock:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def _step(model: torch.nn.Module, sync: GradientSynchronizer, rank: int, step: int) -> None:
    g = torch.Generator().manual_seed(10 * rank + step)
    model(torch.randn(3, 4, generator=g)).pow(2).sum().backward()
    sync.finish()


def test_a_rider_s_values_are_summed_by_the_step_s_gradient_reduction_without_a_message_of_its_own():
    def replica(strategy):
        collective = strategy.collective
        rank = strategy.replica_id
        flag = StepFlag()
        rider = StepRider(3, lambda: torch.eye(3)[rank] * (step_no[0] + 1))
        flag.add_rider(rider)
        collective._step_flag = flag
        model = _model()
        sync = GradientSynchronizer(collective)
        sync.add_parameters(list(model.parameters()))
        step_no, taken, messages = [0], [], []
        for step in range(3):
            step_no[0] = step
            before = sum(collective.calls.values())
            _step(model, sync, rank, step)
            messages.append(sum(collective.calls.values()) - before)
            taken.append(rider.take())
            for p in model.parameters():
                p.grad = None
        return taken, messages, flag.width

    for taken, messages, width in run_workers(replica, 2):
        assert taken == [[1.0, 1.0, 0.0], [2.0, 2.0, 0.0], [3.0, 3.0, 0.0]]
        assert messages == [1, 1, 1]  # the model's one gradient bucket, the rider inside it
        assert width == 4  # three rider elements and the flag's own


def test_the_vote_entries_say_who_leaves_who_joins_and_whether_to_snapshot():
    summed = vote_entries(2, 3, wants=True) + vote_entries(0, 3, wants=True, admit=[1], snapshot=True)
    assert read_vote(summed.tolist(), 3) == ([2], [1], True)  # the chief's own wish to leave is ignored
    assert read_vote(vote_entries(1, 3, wants=False, snapshot=True).tolist(), 3).snapshot is False


class _KeepingCollective(ThreadCollective, ReductionLog):
    """A collective whose log keeps reduced buckets, as an elastic one does (`keeps`)."""

    def __init__(self, group, rank):
        super().__init__(group, rank)
        self.kept = []

    def keeps(self, tensor):
        return any(t is tensor for t in self.kept)

    def all_reduce_logged(self, tensor, refill):
        assert callable(refill)
        self.all_reduce(tensor)
        self.kept.append(tensor)
        return None


def test_the_synchronizer_reduces_into_another_buffer_while_the_log_keeps_the_last_one():
    from distrib.testing.simulated import _Group

    collective = _KeepingCollective(_Group(1, 5.0), 0)
    model = _model()
    sync = GradientSynchronizer(collective)
    sync.add_parameters(list(model.parameters()))
    for step in range(3):
        _step(model, sync, 0, step)
        kept = collective.kept[-1]
        assert model[0].weight.grad.untyped_storage().data_ptr() == kept.untyped_storage().data_ptr()
        model.zero_grad(set_to_none=True)
    assert len({id(t) for t in collective.kept}) == 3  # three buffers: each step's stays with the log
    oldest = collective.kept.pop(0)  # the log lets go of the oldest one
    _step(model, sync, 0, 3)
    assert collective.kept[-1] is oldest  # reused, not a fourth buffer
    assert all(t is not oldest for t in collective.kept[:-1])


def _logged(log: OpLog, value: float) -> torch.Tensor:
    log.mark_step()
    result = torch.full((4,), value)
    log.record("all_reduce@grad", [result], handed_over=True)
    return result


def test_the_log_keeps_a_handed_over_result_itself_until_no_snapshot_needs_it():
    log = OpLog()
    log.record("broadcast@init", [torch.zeros(2)])  # start-up results are always copies
    first = _logged(log, 1.0)
    assert log.entries[0].outputs[0] is first and log.holds(first)
    log.keep_snapshot(b"s1")
    second = _logged(log, 2.0)
    log.keep_snapshot(b"s2")  # the entries before s1 are dropped
    assert not log.holds(first) and log.holds(second)
    assert not log.check_handed_over() and not log.copy_all


def test_a_result_changed_in_place_is_spoilt_and_the_log_copies_from_then_on(caplog):
    log = OpLog()
    log.record("broadcast@init", [torch.zeros(2)])
    _logged(log, 0.0)
    log.keep_snapshot(b"before")
    spoilt = _logged(log, 1.0)
    spoilt.zero_()  # zero_grad(set_to_none=False) on the reduced gradients
    assert log.check_handed_over() and log.copy_all and log.has_spoilt()
    later = _logged(log, 3.0)
    assert not log.holds(later) and log.entries[-1].outputs[0] is not later  # a copy now
    log.mark_step()
    payload = decode_payload(encode_payload(log, until=log.seq, since=log.seq, replace=True))
    assert "changed reduced gradients in place" in payload["error"]
    assert payload["entries"] == []
    log.keep_snapshot(b"after")
    log.keep_snapshot(b"after2")
    assert not log.has_spoilt()  # no snapshot needs the spoilt entry any more


def test_the_chief_asks_for_a_snapshot_rarely_sooner_when_the_log_grew_or_a_joiner_waits():
    waiting = []
    policy = SnapshotPolicy(every=100, joiners_waiting=lambda: list(waiting))
    log = OpLog()
    assert policy.wants(log)  # none kept yet
    log.mark_step()
    log.keep_snapshot(b"x" * 1000)
    policy.kept(log.snapshots[-1].data)
    for _ in range(99):
        log.mark_step()
        log.record("all_reduce@grad", [torch.zeros(10)])
        assert not policy.wants(log)
    log.mark_step()
    assert policy.wants(log)  # 100 steps since the last
    log.keep_snapshot(b"y")
    policy.kept(b"y" * (LOG_FLOOR_BYTES // 2))  # a large snapshot: the log may hold four times it
    big = torch.zeros(LOG_FLOOR_BYTES // 4, dtype=torch.uint8)
    for expected in (False, False, False, False, False, False, False, True):
        log.mark_step()
        log.record("all_reduce@grad", [big])
        assert policy.wants(log) is expected
    log.keep_snapshot(b"z")
    policy.kept(b"z")
    log.mark_step()
    assert not policy.wants(log)
    waiting.append(2)
    assert policy.wants(log)


def test_a_call_site_is_named_alike_every_time_and_apart_from_another_line():
    names = [call_site(skip=1) for _ in range(2)]
    other = call_site(skip=1)
    assert names[0] == names[1] != other
    assert other.startswith("test_elastic_no_copy.py:test_a_call_site_is_named_alike")


@pytest.mark.parametrize("rank,expected", [(0, False), (1, True)])
def test_only_a_non_chief_can_vote_to_leave(rank, expected):
    assert (read_vote(vote_entries(rank, 2, wants=True).tolist(), 2).leave == [rank]) is expected


def test_a_result_the_log_let_go_of_may_be_written_again_without_being_taken_for_a_change():
    """After a resize (or a snapshot that no longer needs it) the owner reuses the buffer: not spoilt."""
    log = OpLog()
    log.record("broadcast@init", [torch.zeros(2)])
    reused = _logged(log, 1.0)
    log.forget_before_resize()
    reused.fill_(5.0)  # the synchronizer reduces into it again
    log.mark_step()
    assert not log.check_handed_over() and not log.copy_all
