"""Before workers leave an elastic job, every metric's sums move to replica 0 (one all-reduce)."""
import pytest
import torch

from distrib.comm.elastic_abilities import ElasticAbilities
from distrib.metrics import Mean
from distrib.metrics.elastic_fold import MetricFold, register_for_resizes


class _FixedCollective:
    """Stands in for replica ``rank`` of a fixed-size job whose other replicas hold ``others``."""

    def __init__(self, rank, others):
        self.rank, self.others, self.listeners, self.calls = rank, others, [], 0

    def all_reduce(self, tensor, op):
        self.calls += 1
        return tensor + self.others

    def control_all_reduce(self, tensor, op):
        return tensor.clone()  # the other replicas hold as many state values


class _Collective(_FixedCollective, ElasticAbilities):
    """Stands in for replica ``rank`` of an elastic job whose other replicas hold ``others``."""

    def add_resize_listener(self, listener):
        self.listeners.append(listener)

    def add_snapshot_listener(self, listener):
        self.snapshot_listeners = getattr(self, "snapshot_listeners", []) + [listener]


class _Strategy:
    def __init__(self, collective):
        self.collective = collective


def _metrics(values):
    a, b = Mean(), Mean()
    a.update_state(torch.tensor(values))
    b.update_state(torch.tensor([10.0]))
    return a, b


def _two_metrics_folded_on(rank):
    """Means a (saw 1, 2) and b (saw 10) on replica ``rank``; the other replicas: a saw 3 examples
    summing to 9, b 1 example of 5."""
    a, b = _metrics([1.0, 2.0])
    collective = _Collective(rank, torch.tensor([9.0, 3.0, 5.0, 1.0], dtype=torch.float64))
    fold = MetricFold(collective)
    fold.add(a)
    fold.add(b)
    return a, b, collective, fold


def test_replica_0_takes_every_replicas_sums_and_the_others_keep_zeros_in_one_all_reduce():
    for rank in (0, 1):
        a, b, collective, fold = _two_metrics_folded_on(rank)
        fold([False, True])
        assert collective.calls == 1
        if rank == 0:
            assert float(a.local_result()) == pytest.approx(12 / 5) and float(b.local_result()) == 15 / 2
        else:
            assert all(float(t) == 0.0 for m in (a, b) for t in m.state_tensors().values())


def test_only_metrics_of_an_elastic_job_are_registered_once_per_collective():
    elastic = _Collective(0, torch.zeros(2, dtype=torch.float64))
    fixed = _FixedCollective(0, torch.zeros(2, dtype=torch.float64))
    kept = []
    for collective in (elastic, fixed):
        for _ in range(2):
            m = Mean()
            m.distribute_strategy = _Strategy(collective)
            register_for_resizes(m)
            kept.append(m)
    assert len(elastic.listeners) == 1 and elastic.listeners[0].metrics == kept[:2]
    assert elastic.snapshot_listeners == elastic.listeners  # the same fold runs before each snapshot
    assert fixed.listeners == [] and not hasattr(fixed, "snapshot_listeners")


def test_a_dropped_metric_is_not_folded_and_different_lists_skip_the_fold():
    collective = _Collective(0, torch.zeros(2, dtype=torch.float64))
    fold = MetricFold(collective)
    kept = Mean()
    kept.update_state(torch.tensor([4.0]))
    fold.add(kept)
    fold.add(Mean())  # dropped at once: freed, not folded
    assert fold.metrics == [kept]
    collective.control_all_reduce = lambda t, op: torch.tensor([5.0, -2.0], dtype=torch.float64)  # 2 vs 5 values
    fold([False, True])
    assert collective.calls == 0 and float(kept.local_result()) == 4.0


def test_before_a_snapshot_sums_move_to_replica_0_and_a_restored_replacement_zeros_its_own():
    """A replacement (never replica 0) restores one survivor's snapshot, taken after the fold."""
    for rank in (0, 1):
        a, b, collective, fold = _two_metrics_folded_on(rank)
        fold.before_snapshot()
        assert collective.calls == 1
        held = [float(t) for m in (a, b) for t in m.state_tensors().values()]
        assert held == ([12.0, 5.0, 15.0, 2.0] if rank == 0 else [0.0] * 4)
        a.update_state(torch.tensor([7.0]))  # the program's checkpoint loads a survivor's sums into it
        fold.restored()
        after = [float(t) for m in (a, b) for t in m.state_tensors().values()]
        assert after == ([19.0, 6.0, 15.0, 2.0] if rank == 0 else [0.0] * 4)


def test_a_replacement_of_replica_0_puts_back_the_totals_kept_with_the_snapshot():
    """The chief is replaced like any worker: the snapshot came from another survivor (zeros after the
    fold), and the totals every replica kept with it go back onto replica 0."""
    a, b, collective, fold = _two_metrics_folded_on(1)  # a survivor that is not replica 0
    fold.before_snapshot()
    totals = fold.snapshot_extra()
    assert totals.tolist() == [12.0, 5.0, 15.0, 2.0]
    chief_a, chief_b = _metrics([0.5])
    chief = MetricFold(_Collective(0, torch.zeros(4, dtype=torch.float64)))
    chief.add(chief_a)
    chief.add(chief_b)
    chief.restored(totals)
    assert [float(t) for m in (chief_a, chief_b) for t in m.state_tensors().values()] == [12.0, 5.0, 15.0, 2.0]
    chief.restored(torch.zeros(3, dtype=torch.float64))  # metrics that do not match: they start from zero
    assert [float(t) for m in (chief_a, chief_b) for t in m.state_tensors().values()] == [0.0] * 4
