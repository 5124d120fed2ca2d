"""TFRecordDataset under two real worker processes: FILE/AUTO sharding gives each worker its own files.

The four part files TF wrote (tests/tf_reference/generate_tfrecord_io.py) are read by
``MultiWorkerMirroredStrategy`` with 2 workers: under FILE and AUTO worker *i* reads files
*i*, *i*+2 (TF's rule), record by record; under DATA both read every file and split each
global batch.
"""
import json
from pathlib import Path

from distrib.testing import run_cluster

PARTS_DIR = Path(__file__).resolve().parents[1] / "data" / "tf_reference" / "tfrecord_io" / "parts"
REF = json.loads((PARTS_DIR.parent / "tfrecord_io.json").read_text())


def read_parts(parts_dir):
    import distrib
    from distrib.data import AutoShardPolicy, Dataset, TFRecordDataset

    strategy = distrib.MultiWorkerMirroredStrategy()
    out = {}
    for policy in ("FILE", "AUTO", "DATA"):
        for source in ("list", "list_files"):
            paths = sorted(str(p) for p in Path(parts_dir).glob("part-*.tfrecord"))
            files = paths if source == "list" else Dataset.list_files(f"{parts_dir}/part-*.tfrecord", shuffle=False)
            options = distrib.data.Options()
            options.experimental_distribute.auto_shard_policy = getattr(AutoShardPolicy, policy)
            ds = TFRecordDataset(files).map(lambda r: int(r[4:5]) * 100 + int(r.split(b"-")[1])).batch(2)
            dist = strategy.experimental_distribute_dataset(ds.with_options(options))
            out[f"{policy}/{source}"] = [[t.tolist() for t in strategy.experimental_local_results(b)] for b in dist]
    return out


def _ids(file_indices):
    order = REF["parallel_reads"]["list/None"]
    return [int(r[4]) * 100 + int(r.split("-")[1]) for r in order if int(r[4]) in file_indices]


def test_two_workers_each_read_their_own_tfrecord_files(tmp_path):
    results = run_cluster(read_parts, num_workers=2, args=(str(PARTS_DIR),), timeout=240,
                          env={"OMP_NUM_THREADS": "1"})
    for worker, got in enumerate(results):
        mine = _ids({worker, worker + 2})
        for policy in ("FILE", "AUTO"):
            for source in ("list", "list_files"):
                flat = [v for batch in got[f"{policy}/{source}"] for local in batch for v in local]
                assert flat == mine, (worker, policy, source)
        data = [v for batch in got["DATA/list"] for local in batch for v in local]
        assert set(data) < set(_ids({0, 1, 2, 3})) and len(data) == 7  # half of every global batch of 2
    both = [v for got in results for batch in got["DATA/list"] for local in batch for v in local]
    assert sorted(both) == sorted(_ids({0, 1, 2, 3}))
