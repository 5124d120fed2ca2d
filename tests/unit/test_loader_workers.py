"""A torch ``DataLoader`` with ``num_workers > 0`` handed to distrib keeps its worker processes."""
import torch
from torch.utils.data import DataLoader, Dataset as TorchDataset, get_worker_info

from distrib.data import as_dataset
from distrib.data.parallel.loader_workers import replica_plan


class Tagged(TorchDataset):
    """Rows ``(x, where)``: ``where`` is 1 when ``__getitem__`` ran in a loader worker process."""

    def __init__(self, n):
        self.x = torch.arange(n * 3.0).reshape(n, 3)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], torch.tensor(0 if get_worker_info() is None else 1)


def batches(num_workers, seed=11):
    torch.manual_seed(seed)
    loader = DataLoader(Tagged(50), batch_size=8, shuffle=True, num_workers=num_workers)
    return [(x.tolist(), w.tolist()) for x, w in as_dataset(loader)]


def test_batches_come_from_the_loaders_worker_processes_and_are_unchanged():
    serial, parallel = batches(0), batches(2)
    assert [x for x, _ in parallel] == [x for x, _ in serial]
    assert all(set(w) == {1} for _, w in parallel)
    assert all(set(w) == {0} for _, w in serial)


def test_resume_restarts_the_workers_at_the_saved_batch():
    torch.manual_seed(11)
    ds = as_dataset(DataLoader(Tagged(50), batch_size=8, shuffle=True, num_workers=2))
    it = iter(ds)
    head = [next(it)[0].tolist() for _ in range(3)]
    state = it.state_dict()
    rest = [x.tolist() for x, _ in it]
    again = iter(ds)
    again.load_state_dict(state)
    got = [(x.tolist(), w.tolist()) for x, w in again]
    assert [x for x, _ in got] == rest and all(set(w) == {1} for _, w in got)
    assert head + rest == [x for x, _ in batches(0)]


def test_a_replicas_plan_is_its_slice_of_every_batch():
    assert replica_plan([[5, 6, 7, 8, 9], [1, 2]], (2, 1)) == [[8, 9], [2]]
    assert replica_plan([[5, 6, 7]], None) == [[5, 6, 7]]


def test_batches_asked_for_out_of_plan_are_fetched_here():
    torch.manual_seed(11)
    ds = as_dataset(DataLoader(Tagged(50), batch_size=8, shuffle=True, num_workers=2)).shuffle(7, seed=3)
    got = [(x.tolist(), w.tolist()) for x, w in ds]
    torch.manual_seed(11)
    serial = [x.tolist() for x, _ in as_dataset(DataLoader(Tagged(50), batch_size=8, shuffle=True)).shuffle(7, seed=3)]
    assert [x for x, _ in got] == serial


def test_starting_the_workers_leaves_torchs_global_generator_alone():
    torch.manual_seed(11)
    loader = DataLoader(Tagged(50), batch_size=8, shuffle=True, num_workers=2)
    it = iter(as_dataset(loader))
    torch.manual_seed(123)
    next(it)  # the worker loader starts here
    assert torch.equal(torch.rand(3), torch.rand(3, generator=torch.Generator().manual_seed(123)))
