"""What a resize does to the input, in one process: the same global batches, split anew; per-worker input refuses.

A host whose placement changes between steps stands in for an elastic job
that shrank (`distrib.comm.elastic.resize`); the multi-process behaviour is
tested in ``tests/distributed/test_elastic_resize.py``.
"""
import logging

import pytest
import torch

from distrib.comm.collective import LocalCollective
from distrib.comm.elastic.resize import changes_to_make, membership_votes, next_members
from distrib.data import Dataset
from distrib.data.distribution.distributed import distribute_dataset
from distrib.data.distribution.distributed_iterator import InputReshardError
from distrib.data.distribution.input_context import InputContext, InputPlacement
from distrib.data.options import AutoShardPolicy, Options
from distrib.data.distribution.sharding import Sharding, resharding_limit


class Host:
    """An `InputHost` whose replica count the test changes (what a resize does to a strategy)."""

    def __init__(self, replicas, replica):
        self.placement = InputPlacement(num_input_pipelines=replicas, input_pipeline_id=replica)
        self.collective = LocalCollective()
        self.device = torch.device("cpu")

    def input_placement(self):
        return self.placement

    def input_context(self):
        return InputContext(self.placement.num_input_pipelines, self.placement.input_pipeline_id)


def _rows(batch):
    return batch.reshape(-1).tolist()


def test_a_shrink_keeps_the_global_batches_and_splits_them_anew():
    host = Host(3, 2)  # the third of 3 replicas; after the resize, the second of 2
    it = iter(distribute_dataset(host, Dataset.from_tensor_slices(torch.arange(24.0)).batch(6)))
    assert _rows(next(it)) == [4.0, 5.0]
    host.placement = InputPlacement(num_input_pipelines=2, input_pipeline_id=1)
    assert _rows(next(it)) == [9.0, 10.0, 11.0]     # rows 3..5 of the second global batch
    assert it.next_with_global_size()[1] == 6       # losses are still divided by the global batch


@pytest.mark.parametrize("policy", [AutoShardPolicy.OFF])
def test_input_that_cannot_be_resharded_says_so_before_training_and_refuses(monkeypatch, caplog, policy):
    monkeypatch.setenv("DISTRIB_ELASTIC", "1")
    options = Options()
    options.distribute.auto_shard_policy = policy
    host = Host(2, 1)
    with caplog.at_level(logging.WARNING, logger="distrib.data"):
        it = iter(distribute_dataset(host, Dataset.from_tensor_slices(torch.arange(8.0)).batch(4).with_options(options)))
    assert sum("cannot be resharded" in r.getMessage() for r in caplog.records) == 1
    next(it)
    host.placement = InputPlacement()
    with pytest.raises(InputReshardError, match="from 2 to 1 replicas but this input cannot be resharded"):
        next(it)


def test_only_data_sharding_can_follow_a_resize():
    assert resharding_limit(Sharding.DATA) is None
    assert all(resharding_limit(s) for s in (Sharding.FILE, Sharding.OFF, Sharding.LOCAL))


def test_the_vote_is_one_entry_per_task_and_the_chief_never_leaves():
    others = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)  # what worker 1 contributes
    others = torch.cat([others, torch.zeros(1, dtype=torch.float64)])  # and no snapshot wish
    assert membership_votes(lambda t: t + others, task=0, tasks=3, wants=True) == ([1], [], False)  # the chief: ignored
    assert membership_votes(lambda t: t, task=2, tasks=3, wants=True) == ([2], [], False)
    assert membership_votes(lambda t: t, task=0, tasks=3, wants=False, admit=[1]) == ([], [1], False)
    # only the chief's snapshot wish counts: it holds no snapshot since the job changed size
    assert membership_votes(lambda t: t, task=0, tasks=3, wants=False, snapshot=True).snapshot
    assert not membership_votes(lambda t: t, task=1, tasks=3, wants=False, snapshot=True).snapshot
    assert next_members([0, 1, 2], leave=[1], join=[]) == [0, 2]
    assert next_members([0, 2], leave=[], join=[1]) == [0, 1, 2]


def test_a_vote_already_in_effect_changes_nothing_for_the_joiner_that_replays_it():
    """A custom loop's joiner replays the vote that admitted it (its snapshot is from before that step)."""
    assert changes_to_make([0, 2], leave=[], join=[1]) == ([], [1])            # the members grow
    assert changes_to_make([0, 1, 2], leave=[], join=[1]) == ([], [])          # the joiner: done
    assert changes_to_make([0, 1], leave=[2], join=[1]) == ([], [])            # left and joined in one vote
    assert changes_to_make([0, 1, 2], leave=[2], join=[]) == ([2], [])
