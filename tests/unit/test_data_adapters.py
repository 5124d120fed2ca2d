"""Other inputs: torch datasets and loaders, numpy arrays, Python iterables."""
import json

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from distrib.data import AutoShardPolicy, Options
from distrib.data.distribution.adapters import as_dataset
from distrib.testing.simulated import run_workers


class CountingDataset(torch.utils.data.Dataset):
    """A map-style dataset that records which indices were read."""

    def __init__(self, n):
        self.n, self.read = n, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.read.append(i)
        return torch.tensor([float(i)]), i


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter([torch.tensor([i, i]) for i in range(self.n)])


def _ids(batch):
    return [int(v) for v in (batch[-1] if isinstance(batch, (tuple, list)) else batch)]


def test_numpy_arrays_become_tensor_slices():
    ds = as_dataset((np.zeros((5, 2)), np.arange(5)))
    assert ds.cardinality() == 5 and next(iter(ds))[0].dtype == torch.float64


def test_tensor_dataset_is_indexed_directly():
    ds = as_dataset(TensorDataset(torch.arange(6.0), torch.arange(6))).shuffle(6, seed=0).batch(4)
    x, y = next(iter(ds))
    assert x.tolist() == [float(v) for v in y]


def test_map_style_dataset_reads_only_what_each_replica_needs():
    data = CountingDataset(40)
    source = as_dataset(data).batch(10)

    def body(strategy):
        return [_ids(b) for b in strategy.experimental_distribute_dataset(source)]

    shares = run_workers(body, 2)
    assert sorted(sum(shares[0], []) + sum(shares[1], [])) == list(range(40))
    assert sorted(data.read) == list(range(40))  # each index read once over both workers


def test_dataloader_global_batches_are_resharded_through_its_sampler():
    loader = DataLoader(TensorDataset(torch.arange(50.0), torch.arange(50)), batch_size=8, shuffle=True)

    def body(strategy):
        dist = strategy.experimental_distribute_dataset(loader)
        return [[_ids(b) for b in dist] for _ in range(2)]

    a, b = run_workers(body, 2)
    for epoch in range(2):
        assert len(a[epoch]) == len(b[epoch]) == 7
        mine, theirs = sum(a[epoch], []), sum(b[epoch], [])
        assert sorted(mine + theirs) == list(range(50)) and not set(mine) & set(theirs)
        assert all(len(x) == 4 for x in a[epoch][:-1])
    assert a[0] != a[1]  # the sampler reshuffles every pass


def test_dataloader_with_custom_collate_and_restore():
    def collate(items):
        return {"x": torch.stack([i[0] for i in items]), "id": torch.tensor([i[1] for i in items])}
    loader = DataLoader(CountingDataset(30), batch_size=6, shuffle=True, collate_fn=collate)

    def first(strategy):
        it = iter(strategy.experimental_distribute_dataset(loader))
        next(it)
        state = json.loads(json.dumps(it.state_dict()))
        return state, [b["id"].tolist() for b in it]

    saved = run_workers(first, 2)

    def resumed(strategy):
        it = iter(strategy.experimental_distribute_dataset(loader))
        it.load_state_dict(saved[strategy.replica_id][0])
        return [b["id"].tolist() for b in it]

    assert run_workers(resumed, 2) == [s[1] for s in saved]


def test_dataloader_with_a_seeded_generator_is_restored_exactly():
    def make():
        return DataLoader(TensorDataset(torch.arange(20)), batch_size=4, shuffle=True,
                          generator=torch.Generator().manual_seed(7))
    loader = make()
    it = iter(as_dataset(loader))
    next(it)
    state = it.state_dict()
    rest = [b[0].tolist() for b in it]
    again = iter(as_dataset(make()))
    again.load_state_dict(state)
    assert [b[0].tolist() for b in again] == rest


def test_iterable_dataset_loader_under_data_and_file():
    loader = DataLoader(Stream(10), batch_size=4)

    def body(strategy):
        return [_ids(b[:, 0]) for b in strategy.experimental_distribute_dataset(loader)]

    a, b = run_workers(body, 2)
    assert a == [[0, 1], [4, 5], [8]] and b == [[2, 3], [6, 7], [9]]
    options = Options()
    options.distribute.auto_shard_policy = AutoShardPolicy.FILE
    with pytest.raises(ValueError, match="AutoShardPolicy.DATA"):
        run_workers(lambda s: s.experimental_distribute_dataset(
            as_dataset(loader).with_options(options)), 2)


def test_python_list_of_global_batches():
    batches = [(torch.arange(4.0) + 4 * k, torch.arange(4) + 4 * k) for k in range(3)]

    def body(strategy):
        return [_ids(b) for b in strategy.experimental_distribute_dataset(batches)]
    assert run_workers(body, 2) == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10, 11]]]


def test_dataset_function_may_return_a_dataloader_used_as_is():
    def body(strategy):
        r = strategy.replica_id

        def dataset_fn(ctx):
            return DataLoader(TensorDataset(torch.arange(10 + 10 * r)), batch_size=ctx.get_per_replica_batch_size(8))
        return [b[0].tolist() for b in strategy.distribute_datasets_from_function(dataset_fn)]
    a, b = run_workers(body, 2)
    assert len(a) == len(b) == 5
    assert a[:3] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] and a[3:] == [[], []]
    assert sum(b, []) == list(range(20))


def test_one_shot_iterators_and_strings_are_refused():
    with pytest.raises(TypeError, match="one-shot"):
        as_dataset(iter([1, 2]))
    with pytest.raises(TypeError, match="string"):
        as_dataset("data.csv")
    with pytest.raises(TypeError, match="cannot make a dataset"):
        as_dataset(3)


def test_a_loader_with_a_distributed_sampler_is_not_split_twice():
    from torch.utils.data import DistributedSampler

    data = TensorDataset(torch.arange(8))
    loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, num_replicas=2, rank=0))
    with pytest.raises(ValueError, match="already shards with a DistributedSampler"):
        run_workers(lambda s: s.experimental_distribute_dataset(loader), 2)
