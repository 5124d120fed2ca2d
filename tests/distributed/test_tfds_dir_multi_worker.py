"""`load_tfds_dir` on 2 real workers: AUTO sharding gives each worker its own TFDS shards (FILE)."""
import json
from pathlib import Path

import pytest

from distrib.testing import run_cluster

DATA = Path(__file__).resolve().parents[1] / "data" / "tf_reference"
TF = json.loads((DATA / "tfds_tiny.json").read_text())


def labels_and_pixels_per_worker(directory):
    import distrib
    from distrib.datasets import load_tfds_dir

    strategy = distrib.MultiWorkerMirroredStrategy()
    ds = load_tfds_dir(directory, "train").map(lambda e: (e["label"], e["image"]))
    dist = strategy.experimental_distribute_dataset(ds.batch(4))
    labels, pixels = [], []
    for label, image in dist:
        labels.extend(label.tolist())
        pixels.extend(int(v) for v in image.flatten(1).sum(1))   # (a worker that ran out gets empty batches)
    return {"labels": labels, "pixels": pixels}


@pytest.mark.timeout(240)
def test_each_worker_reads_its_own_shards():
    a, b = run_cluster(labels_and_pixels_per_worker, num_workers=2, args=[str(DATA / TF["directory"])], timeout=200)
    train = TF["splits"]["train"]
    sums = [sum(e["image"]["value"]) for e in train]
    labels = [e["label"]["value"][0] for e in train]
    # dataset_info.json's shard lengths are 8, 7, 8: worker 0 reads shards 0 and 2, worker 1 shard 1
    assert a == {"labels": labels[:8] + labels[15:], "pixels": sums[:8] + sums[15:]}
    assert b == {"labels": labels[8:15], "pixels": sums[8:15]}
