"""ModelCheckpoint, save_weights and export with 2 real workers: chief-only files, loadable by one process."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import distrib
from distrib.testing import run_cluster

pytestmark = pytest.mark.timeout(300)

RNG = np.random.default_rng(0)
X = RNG.normal(size=(64, 5)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0).astype(np.int64)


def _net():
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def train_with_checkpoints(directory):
    torch.manual_seed(0)
    strategy = distrib.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = distrib.Model(_net())
        model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    ckpt = distrib.callbacks.ModelCheckpoint(os.path.join(directory, "ckpts", "ckpt_{epoch:02d}"),
                                             save_weights_only=True, save_best_only=True, monitor="loss")
    model.fit(X, Y, batch_size=16, epochs=3, verbose=0, callbacks=[ckpt])
    model.export(os.path.join(directory, "export"), input_signature=[distrib.TensorSpec((None, 5), torch.float32)])
    model.save(os.path.join(directory, "model"))
    return {"chief": strategy.is_chief, "saved": ckpt.saved_paths,
            "predictions": model.predict(X, verbose=0).tolist()}


def test_two_workers_write_once_and_one_process_loads_everything(tmp_path):
    (tmp_path / "tmp").mkdir()
    results = run_cluster(train_with_checkpoints, num_workers=2, args=(str(tmp_path),), timeout=240,
                          env={"OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path / "tmp")})
    assert results[0]["saved"] == results[1]["saved"] and results[0]["saved"]   # same decisions everywhere
    names = sorted(os.listdir(tmp_path / "ckpts"))
    assert names == [os.path.basename(p) for p in results[0]["saved"]]
    assert not [p for p in tmp_path.rglob("*") if "workertemp" in p.name or ".tmp-" in p.name]
    assert not [n for n in os.listdir(tmp_path / "tmp") if n.startswith("distrib-")]   # worker 1's copies are gone
    want = np.array(results[0]["predictions"])

    fresh = distrib.Model(_net())                       # one process, another number of replicas
    fresh.load_weights(distrib.train.latest_checkpoint(str(tmp_path / "ckpts")))
    np.testing.assert_allclose(fresh.predict(X, verbose=0), want, rtol=1e-5, atol=1e-6)
    loaded = distrib.models.load_model(str(tmp_path / "model"))          # no builder: standard layers
    np.testing.assert_allclose(loaded.predict(X, verbose=0), want, rtol=1e-5, atol=1e-6)
    served = distrib.saved_model.load(str(tmp_path / "export"))
    np.testing.assert_allclose(served(torch.from_numpy(X)).numpy(), want, rtol=1e-5, atol=1e-6)
