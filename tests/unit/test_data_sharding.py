"""Auto-sharding policies with 1, 2 and 3 simulated workers (threads with a real collective)."""
import logging

import numpy as np
import pytest

from distrib.testing.files import load_npy
from distrib.data import AutoShardPolicy, Dataset, Options
from distrib.testing.simulated import run_workers

N = 97


def _with_policy(ds, policy):
    options = Options()
    options.experimental_distribute.auto_shard_policy = policy
    return ds.with_options(options)


def _files(tmp_path, sizes):
    paths, start = [], 0
    for k, n in enumerate(sizes):
        path = tmp_path / f"shard-{k:02d}.npy"
        np.save(path, np.arange(start, start + n))
        paths.append(str(path))
        start += n
    return paths, start


def _epochs(make_dataset, workers, passes=2):
    """Per worker, per pass: the examples the worker received."""
    def body(strategy):
        dist = strategy.experimental_distribute_dataset(make_dataset())
        return [[int(v) for batch in dist for v in batch] for _ in range(passes)]
    return run_workers(body, workers)


def _check_partition(shares, total):
    for p in range(len(shares[0])):
        per_worker = [set(w[p]) for w in shares]
        assert sum(len(w[p]) for w in shares) == total          # nothing twice
        assert set().union(*per_worker) == set(range(total))     # nothing missing
        for i in range(len(per_worker)):
            for j in range(i + 1, len(per_worker)):
                assert not per_worker[i] & per_worker[j]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_data_policy_partitions_every_epoch_with_shuffling(workers):
    make = lambda: _with_policy(Dataset.range(N).shuffle(N).batch(12), AutoShardPolicy.DATA)  # noqa: E731
    shares = _epochs(make, workers)
    _check_partition(shares, N)
    assert shares[0][0] != shares[0][1]  # reshuffled between passes


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_file_policy_partitions_every_epoch_with_shuffling(tmp_path, workers):
    paths, total = _files(tmp_path, [11, 3, 17, 0, 9, 14])
    make = lambda: _with_policy(  # noqa: E731
        Dataset.from_files(paths, load_npy).shuffle(20).batch(6), AutoShardPolicy.FILE)
    shares = _epochs(make, workers)
    _check_partition(shares, total)
    for w in range(workers):  # worker w read exactly files w, w+n, ...
        mine = set(np.concatenate([np.load(p) for p in paths[w::workers]]).tolist())
        assert set(shares[w][0]) == mine
    if workers == 1:
        assert shares[0][0] != shares[0][1]


@pytest.mark.parametrize("workers", [2, 3])
def test_off_policy_gives_everyone_everything(workers):
    make = lambda: _with_policy(Dataset.range(N).shuffle(N).batch(12), AutoShardPolicy.OFF)  # noqa: E731
    shares = _epochs(make, workers)
    for w in range(workers):
        for p in range(2):
            assert sorted(shares[w][p]) == list(range(N))
    assert all(s == shares[0] for s in shares)  # same order on every worker


def test_off_policy_batch_is_per_replica_sized():
    def body(strategy):
        ds = _with_policy(Dataset.range(20).batch(8), AutoShardPolicy.OFF)
        return [b.tolist() for b in strategy.experimental_distribute_dataset(ds)]
    a, b = run_workers(body, 2)
    # the partial batch [16..19] fits one per-replica piece: one step, as TF does
    # (tests/data/tf_reference: range10_batch4/OFF gives [8, 9] in one step)
    assert a == b == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15], [16, 17, 18, 19]]


def test_auto_picks_file_for_files_and_data_otherwise(tmp_path, caplog):
    paths, total = _files(tmp_path, [5, 6, 7])
    caplog.set_level(logging.DEBUG, logger="distrib.data")

    def body(strategy):
        files = strategy.experimental_distribute_dataset(Dataset.from_files(paths, load_npy).batch(4))
        tensors = strategy.experimental_distribute_dataset(Dataset.range(18).batch(4))
        return [[int(v) for b in files for v in b], [int(v) for b in tensors for v in b]]

    (f0, t0), (f1, t1) = run_workers(body, 2)
    assert set(f0) == set(np.concatenate([np.load(paths[0]), np.load(paths[2])]).tolist())
    assert set(f1) == set(np.load(paths[1]).tolist())
    assert t0 == [0, 1, 4, 5, 8, 9, 12, 13, 16] and t1 == [2, 3, 6, 7, 10, 11, 14, 15, 17]
    messages = [r.getMessage() for r in caplog.records if r.name == "distrib.data"]
    assert sum("AUTO: sharding by FILE" in m for m in messages) == 2  # once per worker and dataset
    assert sum("AUTO: sharding by DATA" in m for m in messages) == 2
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == "distrib.data")


def test_auto_falls_back_to_data_with_fewer_files_than_workers(tmp_path, caplog):
    paths, total = _files(tmp_path, [10, 10])
    caplog.set_level(logging.DEBUG, logger="distrib.data")
    shares = _epochs(lambda: Dataset.from_files(paths, load_npy).batch(6), 3, passes=1)
    _check_partition(shares, total)
    assert any("fewer than 3 workers" in r.getMessage() for r in caplog.records)


def test_file_policy_with_too_few_files_names_both_numbers(tmp_path):
    paths, _ = _files(tmp_path, [4, 4])
    ds = _with_policy(Dataset.from_files(paths, load_npy).batch(2), AutoShardPolicy.FILE)
    with pytest.raises(ValueError, match="2 files for 3 workers"):
        run_workers(lambda s: s.experimental_distribute_dataset(ds), 3)


def test_file_policy_without_files_is_an_error():
    ds = _with_policy(Dataset.range(8).batch(2), AutoShardPolicy.FILE)
    with pytest.raises(ValueError, match="Dataset.from_files"):
        run_workers(lambda s: s.experimental_distribute_dataset(ds), 2)


def test_shard_in_a_dataset_function_gives_disjoint_shares_even_when_unseeded():
    def body(strategy):
        def dataset_fn(ctx):
            ds = Dataset.range(N).shuffle(N)   # seed 000: shuffle, then shard by pipeline id
            return ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(8)
        dist = strategy.distribute_datasets_from_function(dataset_fn)
        return [[int(v) for b in dist for v in b]]
    _check_partition(run_workers(body, 3), N)
