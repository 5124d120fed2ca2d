"""`experimental_distribute_dataset` / `distribute_datasets_from_function` on simulated workers."""
import json
import logging

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distrib.testing.files import load_npy
from distrib.data import AutoShardPolicy, Dataset, Options, OutOfRangeError, TensorSpec
from distrib.testing.simulated import run_workers


def _rows(batch):
    """The example ids of a batch (the last component of a tuple: labels here are ids)."""
    return [int(v) for v in (batch[-1] if isinstance(batch, tuple) else batch)]


# ----------------------------------------------------------- exact splits
@settings(max_examples=40, deadline=None)
@given(size=st.integers(0, 40), batch=st.integers(1, 11), replicas=st.integers(1, 4),
       drop=st.booleans(), shuffle=st.booleans())
def test_every_global_batch_is_split_exactly(size, batch, replicas, drop, shuffle):
    def make():
        ds = Dataset.from_tensor_slices((torch.arange(size), torch.arange(size) * 10))
        if shuffle:
            ds = ds.shuffle(size + 1, seed=5)
        return ds.batch(batch, drop_remainder=drop)

    expected = [[int(v) for v in b[0]] for b in make()]

    def body(strategy):
        return [[int(v) for v in b[0]] for b in strategy.experimental_distribute_dataset(make())]

    per_worker = run_workers(body, replicas)
    assert all(len(w) == len(expected) for w in per_worker)            # same steps everywhere
    for step, global_batch in enumerate(expected):
        parts = [w[step] for w in per_worker]
        assert sum(parts, []) == global_batch                           # union, in order, no dupes
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_replicas_get_matching_features_and_labels():
    def body(strategy):
        ds = Dataset.from_tensor_slices((torch.arange(10.0), torch.arange(10) * 2)).shuffle(10).batch(4)
        return [(x.tolist(), y.tolist()) for x, y in strategy.experimental_distribute_dataset(ds)]
    for worker in run_workers(body, 2):
        for x, y in worker:
            assert [int(v) * 2 for v in x] == y and len(x) in (1, 2)


# ----------------------------------------------------------- end of data
def test_uneven_per_worker_data_ends_together_and_uses_every_example():
    sizes = [13, 4, 0]

    def body(strategy):
        r = strategy.replica_id
        dist = strategy.distribute_datasets_from_function(
            lambda ctx: Dataset.range(100 * r, 100 * r + sizes[r]).shuffle(20).batch(3))
        out = [b for b in dist]
        return [b.tolist() for b in out], [str(b.dtype) for b in out], dict(strategy.collective.calls)

    results = run_workers(body, 3)
    steps = [len(r[0]) for r in results]
    assert steps == [5, 5, 5]                                    # ceil(13 / 3) on everyone
    for r, (batches, dtypes, calls) in enumerate(results):
        assert sorted(v for b in batches for v in b) == list(range(100 * r, 100 * r + sizes[r]))
        assert set(dtypes) == {"torch.int64"}                     # padding keeps the dtype
        assert calls.get("all_reduce", 0) == 0                   # lengths known: no per-step collective
        assert calls["all_gather"] == 1


def test_uneven_unknown_length_agrees_every_step_and_pads_with_empty_batches():
    def body(strategy):
        r = strategy.replica_id
        dist = strategy.distribute_datasets_from_function(
            lambda ctx: Dataset.range(10 * (r + 1)).filter(lambda v: v % 2 == 0).batch(2))
        it = iter(dist)
        out = []
        while True:
            opt = it.get_next_as_optional()
            if not opt.has_value():
                break
            out.append(opt.get_value().tolist())
        with pytest.raises(OutOfRangeError):
            it.get_next()
        return out, dict(strategy.collective.calls)

    (a, calls_a), (b, calls_b) = run_workers(body, 2)
    assert len(a) == len(b) == 5
    assert a[3:] == [[], []] and sum(a, []) == [0, 2, 4, 6, 8]
    assert sum(b, []) == list(range(0, 20, 2))
    assert calls_a["all_reduce"] == 6                            # 5 steps + the agreed end


def test_padding_batches_have_the_other_workers_shapes_when_a_worker_has_nothing():
    def body(strategy):
        n = 6 if strategy.replica_id == 0 else 0
        dist = strategy.distribute_datasets_from_function(
            lambda ctx: Dataset.from_tensor_slices((torch.zeros(n, 3, 2), torch.zeros(n))).batch(4))
        return [(tuple(x.shape), x.dtype == torch.float32) for x, _ in dist]
    a, b = run_workers(body, 2)
    assert a == [((4, 3, 2), True), ((2, 3, 2), True)]
    assert b == [((0, 3, 2), True), ((0, 3, 2), True)]


def test_data_policy_with_known_length_needs_no_collective_per_step():
    def body(strategy):
        dist = strategy.experimental_distribute_dataset(Dataset.range(1000).shuffle(1000).batch(10))
        n = sum(1 for _ in dist) + sum(1 for _ in dist)
        return n, dict(strategy.collective.calls)
    for n, calls in run_workers(body, 2):
        assert n == 200 and calls == {"broadcast": 2}           # the one seed agreement at creation


def test_file_policy_uneven_files_end_together(tmp_path):
    import numpy as np

    paths = []
    for k, n in enumerate([9, 2, 4]):
        np.save(tmp_path / f"{k}.npy", np.arange(10 * k, 10 * k + n))
        paths.append(str(tmp_path / f"{k}.npy"))
    options = Options()
    options.distribute.auto_shard_policy = AutoShardPolicy.FILE

    def body(strategy):
        dist = strategy.experimental_distribute_dataset(
            Dataset.from_files(paths, load_npy).batch(4).with_options(options))
        return [b.tolist() for b in dist]
    a, b = run_workers(body, 2)
    assert len(a) == len(b)
    assert sorted(sum(a, [])) == list(range(9)) + list(range(20, 24))
    assert sorted(sum(b, [])) == [10, 11]


# ------------------------------------------------------------ positions
def _seed_pipeline():
    x = torch.arange(300.0).reshape(100, 3)
    y = torch.arange(100)
    return Dataset.from_tensor_slices((x, y)).shuffle(100).repeat().batch(8)


def test_distributed_restore_mid_epoch_reproduces_remaining_batches():
    def first_run(strategy):
        torch.manual_seed(strategy.replica_id)
        it = iter(strategy.experimental_distribute_dataset(_seed_pipeline()))
        for _ in range(17):
            next(it)
        state = json.loads(json.dumps(it.state_dict()))
        return state, [_rows(next(it)) for _ in range(30)]

    def resumed(strategy, saved):
        torch.manual_seed(50 + strategy.replica_id)  # another process, other seeds
        it = iter(strategy.experimental_distribute_dataset(_seed_pipeline()))
        it.load_state_dict(saved[strategy.replica_id][0])
        return [_rows(next(it)) for _ in range(30)]

    saved = run_workers(first_run, 2)
    again = run_workers(lambda s: resumed(s, saved), 2)
    assert again == [s[1] for s in saved]


def test_restore_onto_more_workers_keeps_the_global_sequence(caplog):
    def global_sequence(per_worker, steps):
        return [v for step in range(steps) for w in per_worker for v in w[step]]

    def run(strategy, state, steps):
        it = iter(strategy.experimental_distribute_dataset(_seed_pipeline()))
        if state is not None:
            it.load_state_dict(state)
        out = [_rows(next(it)) for _ in range(steps)]
        return out, it.state_dict()

    two = run_workers(lambda s: run(s, None, 10), 2)
    reference = run_workers(lambda s: run(s, two[0][1], 8), 2)
    caplog.set_level(logging.INFO, logger="distrib.data")
    three = run_workers(lambda s: run(s, two[0][1], 8), 3)
    assert global_sequence([r[0] for r in three], 8) == global_sequence([r[0] for r in reference], 8)
    assert [len(r[0][0]) for r in three] == [3, 3, 2]    # each global batch of 8 now split 3 ways
    assert any("saved with 2 replicas restored onto 3" in r.getMessage() for r in caplog.records)


def test_off_policy_restore_onto_fewer_workers_keeps_each_workers_sequence():
    options = Options()
    options.distribute.auto_shard_policy = AutoShardPolicy.OFF

    def run(strategy, state, steps):
        it = iter(strategy.experimental_distribute_dataset(
            Dataset.range(30).shuffle(30, seed=1).batch(9).with_options(options)))
        if state is not None:
            it.load_state_dict(state)
        return [v for _ in range(steps) for v in _rows(next(it))], it.state_dict()

    three = run_workers(lambda s: run(s, None, 4), 3)        # 4 pieces of 3: stops mid-batch
    rest3 = run_workers(lambda s: run(s, three[0][1], 5), 3)[0][0]
    rest1 = run_workers(lambda s: run(s, three[0][1], 2), 1)[0][0]
    assert rest1 == rest3[:len(rest1)] and len(rest1) == 6 + 9   # rest of batch 1, then batch 2


def test_dataset_state_dict_is_taken_up_by_the_next_iter():
    def body(strategy):
        dist = strategy.experimental_distribute_dataset(_seed_pipeline())
        it = iter(dist)
        for _ in range(5):
            next(it)
        state = dist.state_dict()
        expected = [_rows(next(it)) for _ in range(4)]
        other = strategy.experimental_distribute_dataset(_seed_pipeline())
        other.load_state_dict(json.loads(json.dumps(state)))
        again = iter(other)
        return expected == [_rows(next(again)) for _ in range(4)]
    assert run_workers(body, 2) == [True, True]


def test_per_worker_state_is_gathered_and_restored_per_worker():
    def make(strategy):
        r = strategy.replica_id
        return strategy.distribute_datasets_from_function(
            lambda ctx: Dataset.range(100 * r, 100 * r + 30).shuffle(30).batch(4))

    def first(strategy):
        it = iter(make(strategy))
        for _ in range(3):
            next(it)
        state = it.state_dict()
        return state, [b.tolist() for b in it]

    saved = run_workers(first, 2)
    assert len(saved[0][0]["workers"]) == 2

    def resumed(strategy):
        it = iter(make(strategy))
        it.load_state_dict(saved[0][0])   # the chief's copy holds every worker's position
        return [b.tolist() for b in it]

    assert run_workers(resumed, 2) == [s[1] for s in saved]


def test_per_worker_state_onto_other_worker_count_warns_and_starts_over(caplog):
    def body(strategy):
        dist = strategy.distribute_datasets_from_function(lambda ctx: Dataset.range(8).batch(2))
        it = iter(dist)
        next(it)
        return it.state_dict()

    state = run_workers(body, 2)[0]
    caplog.set_level(logging.WARNING, logger="distrib.data")

    def resumed(strategy):
        it = iter(strategy.distribute_datasets_from_function(lambda ctx: Dataset.range(8).batch(2)))
        it.load_state_dict(state)
        return [b.tolist() for b in it]

    assert run_workers(resumed, 3)[0] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert any("cannot be restored onto 3" in r.getMessage() for r in caplog.records)


# ----------------------------------------------------------- misc API
def test_element_spec_is_per_replica():
    def body(strategy):
        dist = strategy.experimental_distribute_dataset(
            Dataset.from_tensor_slices((torch.zeros(8, 5), torch.zeros(8, dtype=torch.int64))).batch(4))
        return dist.element_spec, iter(dist).element_spec
    spec, it_spec = run_workers(body, 2)[0]
    assert spec == it_spec == (TensorSpec((None, 5), torch.float32), TensorSpec((None,), torch.int64))


def test_unbatched_input_is_a_clear_error():
    with pytest.raises(ValueError, match=r"batch the dataset with the global batch size"):
        run_workers(lambda s: list(s.experimental_distribute_dataset(Dataset.range(4))), 2)


def test_dataset_function_returning_none_is_a_clear_error():
    with pytest.raises(ValueError, match="returned None"):
        run_workers(lambda s: s.distribute_datasets_from_function(lambda ctx: None), 1)


def test_input_context_reaches_the_dataset_function():
    def body(strategy):
        seen = []
        strategy.distribute_datasets_from_function(lambda ctx: seen.append(
            (ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.get_per_replica_batch_size(12)))
            or Dataset.range(2))
        return seen
    assert run_workers(body, 3) == [[(3, 0, 4)], [(3, 1, 4)], [(3, 2, 4)]]


def test_dataset_state_after_a_finished_pass_starts_the_next_pass():
    def body(strategy):
        dist = strategy.experimental_distribute_dataset(Dataset.range(12).shuffle(12).batch(4))
        first = [_rows(b) for b in dist]
        state = dist.state_dict()
        second = [_rows(b) for b in dist]
        other = strategy.experimental_distribute_dataset(Dataset.range(12).shuffle(12).batch(4))
        other.load_state_dict(state)
        return first != second and [_rows(b) for b in other] == second
    assert run_workers(body, 2) == [True, True]


def test_map_after_batch_runs_on_each_replicas_slice():
    def body(strategy):
        seen = []
        ds = Dataset.range(8).batch(4).map(lambda b: (seen.append(len(b)), b * 10)[1])
        out = [b.tolist() for b in strategy.experimental_distribute_dataset(ds)]
        return out, seen
    (a, seen_a), (b, seen_b) = run_workers(body, 2)
    assert a == [[0, 10], [40, 50]] and b == [[20, 30], [60, 70]]
    assert seen_a == seen_b == [2, 2]   # as tf.distribute's rebatching: the map sees per-replica batches
