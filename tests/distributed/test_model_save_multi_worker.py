"""model.save / load_model with 2 real workers: chief-only files, temp dirs removed, exact continuation."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import distrib
from distrib.testing import run_cluster

pytestmark = pytest.mark.timeout(240)


@distrib.saving.register_serializable(package="tests")
def build_net():
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def save_load_continue(path, tmpdir):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 5)).astype(np.float32)
    y = (np.abs(x[:, 0] * 2).astype(np.int64) % 3)
    torch.manual_seed(0)
    strategy = distrib.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = distrib.Model(build_net(), builder=f"{__name__}:build_net")
        model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    from distrib.checkpoint.files import storage

    written = []
    original = storage.remove_write_path

    def record(final, write_path):  # what this worker wrote, seen just before its cleanup
        written.append([write_path == final, os.path.exists(os.path.join(write_path, "COMPLETE"))])
        original(final, write_path)
    storage.remove_write_path = record
    try:
        model.save(path)  # every worker calls save, as in the seeds
    finally:
        storage.remove_write_path = original
    leftovers = sorted(n for n in os.listdir(tmpdir) if n.startswith("distrib-workertemp"))
    files = sorted(os.listdir(path))
    with strategy.scope():
        loaded = distrib.models.load_model(path)
    h1 = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    h2 = loaded.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    same = all(np.array_equal(a, b) for a, b in zip(model.get_weights(), loaded.get_weights()))
    return {"same_weights": same, "same_history": h1.history == h2.history, "leftovers": leftovers,
            "files": files, "written": written, "replicas": loaded.distribute_strategy.num_replicas_in_sync,
            "chief": strategy.is_chief}


def test_every_worker_saves_only_the_chief_lands_and_training_continues_exactly(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    path = str(tmp_path / "keras-model")
    results = run_cluster(save_load_continue, num_workers=2, args=(path, str(tmpdir)),
                          env={"TMPDIR": str(tmpdir)}, timeout=200)
    assert [r["chief"] for r in results] == [True, False]
    # the chief wrote the final path; the other worker wrote a complete copy to its own temp dir
    assert [r["written"] for r in results] == [[[True, True]], [[False, True]]]
    for r in results:
        assert r["files"] == ["COMPLETE", "MANIFEST.json", "model.json", "state.safetensors"]
        assert r["leftovers"] == []
        assert r["replicas"] == 2
        assert r["same_weights"] and r["same_history"]
    assert sorted(os.listdir(tmp_path)) == ["keras-model", "tmp"]  # nothing else beside the model
    assert not [n for n in os.listdir(tmpdir) if n.startswith("distrib-workertemp")]
