"""Arrays (and a finite dataset) with ``steps_per_epoch`` past their end on 2 worker processes: Keras 3's epochs.

Each epoch ends where the pass over the data does and the next starts a new
pass (`distrib.training.execution.fit_data`); every worker cuts the same
epochs, so the 2-worker run logs what TensorFlow 2.21's one-process run logs
(``round_four.json``, ``array_passes``; `tests/tf_reference/generate_round_four.py`).
"""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import distrib
from distrib.testing import run_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tf_reference"))
import round_four_scenarios as sc  # noqa: E402

pytestmark = pytest.mark.timeout(240)

PASSES = json.loads((Path(__file__).resolve().parents[1] / "data" / "tf_reference"
                     / "round_four.json").read_text())["array_passes"]
CASES = ["more_steps_than_batches", "validation", "dataset_steps_not_dividing_batches"]   # global batches of 4


class _Recorder(distrib.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.events = []

    def on_epoch_begin(self, epoch, logs=None):
        self.events.append(f"E{epoch}")

    def on_train_batch_begin(self, batch, logs=None):
        self.events.append(f"b{batch}")

    def on_test_batch_begin(self, batch, logs=None):
        self.events.append(f"t{batch}")


def fit_cases(names):
    """Runs in each worker: every case of ``names`` fitted under MultiWorkerMirroredStrategy."""
    strategy = distrib.MultiWorkerMirroredStrategy()
    x, y, vx, vy = sc.data()
    kernel, bias = sc.initial_weights()
    out = {}
    for name in names:
        case = sc.PASS_CASES[name]
        kwargs = dict(case["fit"])
        if "val" in case:
            kwargs["validation_data"] = (vx[:case["val"]], vy[:case["val"]])
        with strategy.scope():
            net = torch.nn.Linear(4, 1)
            with torch.no_grad():
                net.weight.copy_(torch.from_numpy(kernel.T.copy()))
                net.bias.copy_(torch.from_numpy(bias))
            model = distrib.Model(net)
            model.compile(optimizer=distrib.optimizers.SGD(sc.LR), loss="mse")
        recorder = _Recorder()
        data = (x[:case["rows"]], y[:case["rows"]])
        if "dataset_batch" in case:
            data = (distrib.data.Dataset.from_tensor_slices(data).batch(case["dataset_batch"]), None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            history = model.fit(*data, shuffle=False, verbose=0, callbacks=[recorder], **kwargs)
        out[name] = {"history": history.history, "events": recorder.events,
                     "weights": [net.weight.detach().numpy().T.tolist(), net.bias.detach().numpy().tolist()],
                     "ran_out_warnings": sum("ran out of data" in str(w.message) for w in caught)}
    return out


@pytest.fixture(scope="module")
def two_workers():
    return run_cluster(fit_cases, num_workers=2, args=(CASES,), timeout=200, env={"OMP_NUM_THREADS": "1"})


@pytest.mark.parametrize("name", CASES)
def test_two_workers_end_each_epoch_with_the_pass_and_log_tensorflows_numbers(two_workers, name):
    expected = PASSES[name]
    for worker in two_workers:
        got = worker[name]
        assert got["events"] == expected["events"]
        assert sorted(got["history"]) == sorted(expected["history"])
        for key, values in expected["history"].items():
            np.testing.assert_allclose(got["history"][key], values, rtol=1e-5, err_msg=key)
        for ours, theirs in zip(got["weights"], expected["weights"]):
            np.testing.assert_allclose(ours, theirs, rtol=1e-5)
        assert got["ran_out_warnings"] == expected["ran_out_warnings"]
