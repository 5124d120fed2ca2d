"""Arrays (and a finite dataset) with ``steps_per_epoch`` past their end on 2 worker processes: Keras 3's epochs.

Each epoch ends where the pass over the data does and the next starts a new
pass (`distrib.training.execution.fit_data`); every worker cuts the same
epochs, so the 2-worker run logs what TensorFlow 2.21's one-process run logs
(``round_four.json``, ``array_passes``; `tests/tf_reference/generate_round_four.py`).
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import distrib
from distrib.testing import run_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from keras_pass_cases import PASSES, EventRecorder, linear_model, pass_case_inputs  # noqa: E402

pytestmark = pytest.mark.timeout(240)

CASES = ["more_steps_than_batches", "validation", "dataset_steps_not_dividing_batches"]   # global batches of 4


def fit_cases(names):
    """Runs in each worker: every case of ``names`` fitted under MultiWorkerMirroredStrategy."""
    strategy = distrib.MultiWorkerMirroredStrategy()
    out = {}
    for name in names:
        with strategy.scope():
            model = linear_model()
        net = model.module
        recorder = EventRecorder()
        data, kwargs = pass_case_inputs(name)
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
