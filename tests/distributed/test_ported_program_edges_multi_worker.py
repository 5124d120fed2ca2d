"""What public tf.distribute programs hit on 2 real workers and 2 local replicas (issue 39, items 1, 2, 3, 7).

* a last partial batch with fewer rows than replicas (5 examples, batch 4;
  batch 1): every logged loss is the one-process loss, not NaN;
* torch's lazy modules built in the scope train, identical on every worker
  and equal to one process, though the workers seeded differently;
* a model created, saved and loaded inside ``OneDeviceStrategy('/cpu:0').scope()``
  trains alone in each worker (TensorFlow's behaviour); one made outside any
  scope is still refused.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import distrib
from distrib.testing import run_cluster, run_python

pytestmark = pytest.mark.timeout(300)


def _regression_data():
    x = np.random.default_rng(1).normal(size=(5, 3)).astype("float32")
    return x, x.sum(1, keepdims=True)


def _image_data():
    x = np.random.default_rng(2).normal(size=(8, 1, 6, 6)).astype("float32")
    return x, (x.mean((1, 2, 3)) > 0).astype("int64")


def _lazy_cnn():
    return torch.nn.Sequential(torch.nn.LazyConv2d(4, 3), torch.nn.LazyBatchNorm2d(), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.LazyLinear(2))


def _partial_batches(strategy):
    """Item 1: fit and evaluate with arrays and Datasets whose last global batch leaves a replica empty."""
    x, y = _regression_data()
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(torch.nn.Linear(3, 1))
        model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    out = {"fit_arrays": model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history,
           "evaluate_arrays": model.evaluate(x, y, batch_size=4, verbose=0)}
    one_per_step = distrib.data.Dataset.from_tensor_slices((x, y)).batch(1)   # batch 1 on 2 replicas
    out["fit_dataset"] = model.fit(one_per_step, epochs=1, verbose=0).history
    out["evaluate_dataset"] = model.evaluate(distrib.data.Dataset.from_tensor_slices((x, y)).batch(4), verbose=0)
    out["weights"] = [w.tolist() for w in model.get_weights()]
    return out


def _lazy_modules(strategy, seed):
    """Item 2: LazyConv2d, LazyBatchNorm2d and LazyLinear created in the scope, trained by fit."""
    x, y = _image_data()
    torch.manual_seed(seed)                          # workers disagree until the scope broadcasts
    with strategy.scope():
        model = distrib.Model(_lazy_cnn())
        model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history
    return {"history": history, "weights": [w.tolist() for w in model.get_weights()]}


def _one_device(directory, task_id):
    """Item 7: a model made and re-loaded in a OneDeviceStrategy scope trains alone in this worker."""
    x, y = _regression_data()
    torch.manual_seed(5)
    with distrib.OneDeviceStrategy("/cpu:0").scope():
        model = distrib.Model(torch.nn.Linear(3, 1))
        model.compile(optimizer="sgd", loss="mse")
        first = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0).history
    path = f"{directory}/worker{task_id}.keras"          # each worker saves and trains its own model
    model.save(path)
    with distrib.OneDeviceStrategy("/cpu:0").scope():
        loaded = distrib.models.load_model(path)
    second = loaded.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0).history
    outside = distrib.Model(torch.nn.Linear(3, 1))
    outside.compile(optimizer="sgd", loss="mse")
    try:
        outside.fit(x, y, batch_size=4, verbose=0)
        refused = None
    except RuntimeError as e:
        refused = str(e)
    return {"first": first, "second": second, "weights": [w.tolist() for w in loaded.get_weights()],
            "refused": refused}


def each_worker(directory):
    strategy = distrib.MultiWorkerMirroredStrategy()
    task_id = strategy.cluster_resolver.task_id
    return {"partial": _partial_batches(strategy), "lazy": _lazy_modules(strategy, seed=100 + task_id),
            "one_device": _one_device(directory, task_id)}


def one_process(directory):
    strategy = distrib.get_strategy()
    return {"partial": _partial_batches(strategy), "lazy": _lazy_modules(strategy, seed=100),
            "one_device": _one_device(directory, 0)}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("edges"))
    return run_cluster(each_worker, num_workers=2, args=(directory,), timeout=280), one_process(directory)


def _numbers(value):
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _numbers(v)]
    return [float(value)]


def test_an_empty_replica_share_logs_the_one_process_loss(results):
    workers, alone = results
    logged = [k for k in alone["partial"] if k != "weights"]
    for worker in workers:
        for key in logged:
            got, want = _numbers(worker["partial"][key]), _numbers(alone["partial"][key])
            assert not any(math.isnan(v) for v in got), (key, got)
            np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=key)
        np.testing.assert_allclose(_numbers(worker["partial"]["weights"]), _numbers(alone["partial"]["weights"]),
                                   rtol=1e-5, atol=1e-6)


def test_lazy_modules_train_identically_on_every_worker_and_as_one_process(results):
    workers, alone = results
    assert workers[0]["lazy"]["weights"] == workers[1]["lazy"]["weights"]
    assert len(alone["lazy"]["weights"]) == 9   # conv, linear (2 each), BatchNorm (weight, bias, 3 buffers)
    np.testing.assert_allclose(_numbers(workers[0]["lazy"]), _numbers(alone["lazy"]), rtol=1e-4, atol=1e-5)


def test_a_one_device_model_trains_alone_in_each_worker(results):
    workers, alone = results
    for worker in workers:
        one = worker["one_device"]
        assert one["refused"] is not None and "outside any strategy scope" in one["refused"]
        for key in ("first", "second", "weights"):
            np.testing.assert_allclose(_numbers(one[key]), _numbers(alone["one_device"][key]), rtol=1e-6)


LOCAL_REPLICAS_SCRIPT = """
import json, sys
import numpy as np, torch, distrib
sys.path.insert(0, sys.argv[2])
from test_ported_program_edges_multi_worker import _partial_batches, _lazy_modules
strategy = distrib.MirroredStrategy(["/job:localhost/replica:0/task:0/device:CPU:0", "/device:CPU:1"])
result = {"replicas": strategy.num_replicas_in_sync, "partial": _partial_batches(strategy),
          "lazy": _lazy_modules(strategy, seed=100 + strategy.replica_id)}
if strategy.is_chief:
    json.dump(result, open(sys.argv[1], "w"))
"""


def test_tf_device_names_make_two_local_replicas_that_train_lazy_modules_and_partial_batches(results, tmp_path):
    """Items 3, 2 and 1 together, from a plain script: TF's full device names, lazy modules, empty shares."""
    _, alone = results
    script = tmp_path / "local.py"
    script.write_text(LOCAL_REPLICAS_SCRIPT)
    out = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "DISTRIB_LOCAL_DEVICES")}
    proc = run_python([str(script), str(out), str(Path(__file__).parent)], cwd=str(tmp_path),
                      env=dict(env, OMP_NUM_THREADS="1"), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["replicas"] == 2
    for key in ("fit_arrays", "evaluate_arrays", "fit_dataset", "evaluate_dataset", "weights"):
        np.testing.assert_allclose(_numbers(got["partial"][key]), _numbers(alone["partial"][key]), rtol=1e-5,
                                   atol=1e-6, err_msg=key)
    np.testing.assert_allclose(_numbers(got["lazy"]), _numbers(alone["lazy"]), rtol=1e-4, atol=1e-5)
