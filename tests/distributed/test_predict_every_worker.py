"""`Model.predict` under MultiWorkerMirroredStrategy returns every worker's rows, in the dataset's order.

As tf.keras 2.x does: each worker predicts its part (auto-shard DATA: its
rows of each global batch; ``distribute_datasets_from_function``: its own
batches), and every worker gets all 25 predictions in order, the uneven
final batch (25 = 6 x 4 + 1) included, equal to one process predicting the
same dataset. Weights are multiples of 1/8 and inputs small integers, so
every prediction is exact and the comparison is equality.
"""
from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import distrib
from distrib.testing import run_cluster, run_python

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

N, GLOBAL_BATCH = 25, 4


def predict_every_way(kind="multi-worker"):
    """Runs in each worker of the cluster, in each local replica, and alone in the test process."""
    strategy = (distrib.MultiWorkerMirroredStrategy() if kind == "multi-worker"
                else distrib.MirroredStrategy(["cpu:0", "cpu:1"]))
    with strategy.scope():
        model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2)))
        model.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(3)
    model.set_weights([np.round(rng.normal(size=w.shape) * 8) / 8 for w in model.get_weights()])
    x = np.stack([np.arange(N), np.arange(N) % 7 - 3], 1).astype(np.float32)
    dataset = distrib.data.Dataset.from_tensor_slices(x).batch(GLOBAL_BATCH)
    options = distrib.data.Options()
    options.experimental_distribute.auto_shard_policy = distrib.data.experimental.AutoShardPolicy.DATA

    def per_worker(ctx):
        ds = distrib.data.Dataset.from_tensor_slices(x).batch(ctx.get_per_replica_batch_size(GLOBAL_BATCH))
        return ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)

    inputs = {
        "numpy": (x, GLOBAL_BATCH),
        "dataset": (dataset, None),
        "dataset, auto-shard DATA": (dataset.with_options(options), None),
        "distributed dataset": (strategy.experimental_distribute_dataset(dataset), None),
        "datasets from function": (strategy.distribute_datasets_from_function(per_worker), None),
    }
    out = {name: model.predict(data, batch_size=batch, verbose=0).tolist() for name, (data, batch) in inputs.items()}
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=3)
    out["steps_per_execution=3"] = model.predict(dataset, verbose=0).tolist()
    return {"replicas": strategy.num_replicas_in_sync, "replica_id": strategy.replica_id, "predictions": out}


def test_every_worker_gets_every_prediction_in_order():
    alone = predict_every_way()
    assert alone["replicas"] == 1
    expected = alone["predictions"]["numpy"]
    assert len(expected) == N and all(p == expected for p in alone["predictions"].values())
    workers = run_cluster(predict_every_way, num_workers=2, timeout=200)
    for worker in workers:
        assert worker["replicas"] == 2
        for name, predictions in worker["predictions"].items():
            assert predictions == expected, name


LOCAL_REPLICAS_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {here!r})
    from test_predict_every_worker import predict_every_way
    result = predict_every_way("local replicas")
    with open(f"out.{{result['replica_id']}}.json", "w") as f:
        json.dump(result, f)
""")


def test_local_replica_processes_get_every_prediction_in_order(tmp_path):
    expected = predict_every_way()["predictions"]["numpy"]
    script = tmp_path / "predict_local.py"
    script.write_text(LOCAL_REPLICAS_SCRIPT.format(here=str(Path(__file__).parent)))
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "DISTRIB_LOCAL_DEVICES")}
    proc = run_python([str(script)], cwd=tmp_path, env=dict(env, OMP_NUM_THREADS="1"), timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for replica in (0, 1):
        result = json.loads((tmp_path / f"out.{replica}.json").read_text())
        assert result["replicas"] == 2
        for name, predictions in result["predictions"].items():
            assert predictions == expected, (replica, name)
