"""Parallel input under experimental_distribute_dataset on 2 real worker processes: the serial pipeline's batches."""
import pytest
import torch

from distrib.testing import run_cluster


def augmented(n_calls):
    from distrib import image
    from distrib.data import Dataset

    def augment(x):
        img = x.float().reshape(1, 1, 1).expand(5, 5, 3) + torch.arange(25.0).reshape(5, 5, 1)
        return image.random_flip_left_right(image.random_crop(img, (3, 3, 3))), x

    torch.manual_seed(21)
    return Dataset.range(30).shuffle(30, seed=4).map(augment, num_parallel_calls=n_calls).batch(6).prefetch(2)


def tagged_loader(num_workers):
    from torch.utils.data import DataLoader, Dataset, get_worker_info

    class Tagged(Dataset):
        def __len__(self):
            return 40

        def __getitem__(self, i):
            return torch.tensor(float(i)), torch.tensor(0 if get_worker_info() is None else 1)

    return DataLoader(Tagged(), batch_size=8, shuffle=True, num_workers=num_workers,
                      generator=torch.Generator().manual_seed(5))


def replica_batches():
    import distrib

    strategy = distrib.MultiWorkerMirroredStrategy()
    mapped = [[a.tolist(), b.tolist()] for a, b in strategy.experimental_distribute_dataset(augmented(2))]
    loaded = [[x.tolist(), w.tolist()] for x, w in strategy.experimental_distribute_dataset(tagged_loader(2))]
    return {"mapped": mapped, "loaded": loaded}


def _slice(values, r):
    from distrib.data.batch_split import split_bounds

    lo, hi = split_bounds(len(values), 2, r)
    return values[lo:hi]


@pytest.mark.timeout(300)
def test_parallel_map_and_loader_workers_give_each_replica_its_slice_of_the_serial_batches():
    results = run_cluster(replica_batches, num_workers=2, timeout=240)
    serial = [(a.tolist(), b.tolist()) for a, b in augmented(None)]
    from distrib.data import as_dataset

    loader = [x.tolist() for x, _ in as_dataset(tagged_loader(0))]
    for r, got in enumerate(results):
        assert got["mapped"] == [[_slice(a, r), _slice(b, r)] for a, b in serial]
        assert [x for x, _ in got["loaded"]] == [_slice(x, r) for x in loader]
        assert all(set(w) == {1} for _, w in got["loaded"])  # read by the loader's worker processes
