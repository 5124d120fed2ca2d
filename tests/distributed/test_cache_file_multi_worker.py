"""`Dataset.cache(filename)` on 2 real workers: each writes its own file, elements as without a cache."""
import os

import numpy as np
import pytest

from distrib.testing import run_cluster


def cached_passes(directory):
    """Two passes over a FILE-sharded and a DATA-sharded cached pipeline, and the same without cache."""
    import glob

    import numpy as np
    import torch

    import distrib
    from distrib.data import Dataset

    strategy = distrib.MultiWorkerMirroredStrategy()
    paths = sorted(glob.glob(f"{directory}/data/*.npy"))
    calls = {"file": 0, "data": 0}

    def counted(kind):
        def fn(x):
            calls[kind] += 1
            return x * 2
        return fn

    def run(dataset):
        dist = strategy.experimental_distribute_dataset(dataset)
        return [[v for b in dist for v in b.tolist()] for _ in range(2)]

    by_file = Dataset.from_files(paths, np.load)          # AUTO shards it by FILE
    in_memory = Dataset.from_tensor_slices(torch.arange(30))  # AUTO shards it by DATA
    out = {
        "file": run(by_file.map(counted("file")).cache(f"{directory}/cache/f").batch(4)),
        "file_plain": run(by_file.map(lambda x: x * 2).batch(4)),
        "data": run(in_memory.map(counted("data")).cache(f"{directory}/cache/d").batch(4)),
        "data_plain": run(in_memory.map(lambda x: x * 2).batch(4)),
    }
    out["calls"] = calls
    return out


@pytest.mark.timeout(240)
def test_each_worker_writes_its_own_cache_and_yields_what_it_would_without(tmp_path):
    from distrib.data import Dataset
    from distrib.data.caching.cache_file import open_cache
    from distrib.data.iterator import pipeline_signature

    (tmp_path / "data").mkdir()
    start = 0
    for i, size in enumerate([5, 7, 3, 6]):
        np.save(tmp_path / "data" / f"part{i}.npy", np.arange(start, start + size))
        start += size
    results = run_cluster(cached_passes, num_workers=2, args=[str(tmp_path)], timeout=200)
    for r in results:
        assert r["file"][0] == r["file"][1] == r["file_plain"][0]
        assert r["data"][0] == r["data"][1] == r["data_plain"][0]
        # the first pass ran the map on the worker's own elements, the second read its file
        assert r["calls"] == {"file": len(r["file"][0]), "data": 30}
    a, b = results
    assert sorted(a["file"][0] + b["file"][0]) == [2 * v for v in range(start)]   # disjoint FILE shards
    assert not set(a["file"][0]) & set(b["file"][0])
    names = sorted(os.listdir(tmp_path / "cache"))
    assert names == ["d.worker-0-of-2.distrib-cache", "d.worker-1-of-2.distrib-cache",
                     "f.worker-0-of-2.distrib-cache", "f.worker-1-of-2.distrib-cache"]
    signature = pipeline_signature(Dataset.from_files(["x"], np.load).map(abs))
    for worker, result in enumerate(results):   # each file holds its own worker's (unbatched) stream
        reader = open_cache(str(tmp_path / "cache" / f"f.worker-{worker}-of-2.distrib-cache"), signature)
        assert [int(e) for block in reader.blocks() for e in block.elements()] == result["file"][0]
