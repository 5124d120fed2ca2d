"""The distributed input path's parts: global batch sizes, the iterator's phases, pending restores.

Thread workers (`distrib.testing.simulated.run_workers`) run the real
collectives; what TensorFlow itself produces is checked in the
``test_tf_*`` files, this file checks distrib's own bookkeeping.
"""
from __future__ import annotations

import pytest
import torch

from distrib.data import Dataset
from distrib.data.batch_split import global_batch_size, per_replica_batch_size, piece_bounds, split_bounds
from distrib.data.distribution.distributed_iterator import Ending, Phase
from distrib.testing.simulated import run_workers
from distrib.utils.pending_restore import PendingRestore


def test_splits_cover_every_row_once():
    for size, parts in [(10, 3), (1, 2), (0, 2), (12, 4)]:
        rows = [r for i in range(parts) for r in range(*split_bounds(size, parts, i))]
        assert rows == list(range(size))
        pieces = [r for i in range(parts) for r in range(*piece_bounds(size, 12, parts, i))]
        assert pieces == list(range(size))


def test_per_replica_batch_size_names_the_culprit():
    assert per_replica_batch_size(12, 3) == 4
    with pytest.raises(ValueError, match=r"batch_size=10 does not divide by num_replicas_in_sync=4.*8 or 12"):
        per_replica_batch_size(10, 4, what="batch_size=10")


def _sizes(strategy, make):
    it = iter(make(strategy))
    out = []
    while True:
        try:
            batch, size = it.next_with_global_size()
        except StopIteration:
            return out, it
        out.append((int(batch.shape[0]), size))


def test_global_size_is_planned_for_data_and_summed_for_per_worker_input():
    data = lambda s: s.experimental_distribute_dataset(Dataset.range(10).batch(4))  # noqa: E731
    (mine, it0), (theirs, _) = run_workers(lambda s: _sizes(s, data), 2)
    assert [g for _, g in mine] == [g for _, g in theirs] == [4, 4, 2]
    assert [r for r, _ in mine] == [2, 2, 1] and it0.finished

    def uneven(s):  # worker 0 has 5 batches of 2 rows, worker 1 two batches of 3 rows
        return s.distribute_datasets_from_function(
            lambda ctx: Dataset.range(10 if ctx.input_pipeline_id == 0 else 6).batch(
                2 if ctx.input_pipeline_id == 0 else 3))
    (mine, it0), (theirs, it1) = run_workers(lambda s: _sizes(s, uneven), 2)
    assert [g for _, g in mine] == [g for _, g in theirs] == [5, 5, 2, 2, 2]
    assert [r for r, _ in theirs] == [3, 3, 0, 0, 0]  # padded with empty batches, not dropped
    assert it0.ending is it1.ending is Ending.FIXED and it1.phase is Phase.FINISHED


def test_padding_phase_survives_a_checkpoint():
    def run(s):
        dist = s.distribute_datasets_from_function(
            lambda ctx: Dataset.range(6 if ctx.input_pipeline_id == 0 else 2).batch(2))
        it = iter(dist)
        for _ in range(2):
            next(it)
        saved = dist.state_dict()
        phase = it.phase
        rest = [int(b.shape[0]) for b in it]
        dist.load_state_dict(saved)
        resumed = iter(dist)
        return phase, rest, resumed.phase, [int(b.shape[0]) for b in resumed]
    (p0, rest0, q0, again0), (p1, rest1, q1, again1) = run_workers(run, 2)
    assert (p0, p1) == (Phase.READING, Phase.PADDING) and (q0, q1) == (p0, p1)
    assert rest0 == again0 == [2] and rest1 == again1 == [0]


def test_global_size_of_a_single_replica_is_its_rows():
    assert global_batch_size((torch.zeros(3, 2), torch.zeros(3)), None, None, 1) == 3


def test_pending_restore_hands_a_state_over_once():
    later: PendingRestore[dict] = PendingRestore()
    seen = []
    assert not later.apply(seen.append)
    later.hold({"pos": 3})
    assert later.waiting and later.peek() == {"pos": 3}
    assert later.apply(seen.append) and seen == [{"pos": 3}]
    assert not later.waiting and later.take() is None
