"""`examples/guide_custom_callbacks.py` (Keras guide "Writing your own callbacks") beside TF 2.21's run.

TF's outputs: ``round_four.json`` (``custom_callbacks``), written by
`tests/tf_reference/generate_round_four.py` from `guide_custom_callbacks_tf.py`
on the same MNIST rows, first weights and ``shuffle=False``: every hook in
order, each batch's and epoch's logs, where `EarlyStoppingAtMinLoss` stopped
and what the restored best weights evaluate to, the schedule's rates and losses.
"""
import json
import os
from pathlib import Path

import pytest

from distrib.testing import run_python

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = json.loads((ROOT / "tests" / "data" / "tf_reference" / "round_four.json").read_text())[
    "custom_callbacks"]


@pytest.fixture(scope="module")
def port():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # run_python: a fork of the test process's preloaded server where that is exact, else a new process
    proc = run_python([ROOT / "examples" / "guide_custom_callbacks.py"], timeout=280, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])


def _flat(rows):
    return [v for row in rows for v in (row if isinstance(row, list) else [row])]


def test_every_hook_is_called_in_keras_order(port):
    assert port["hooks"] == REFERENCE["hooks"]


def test_batch_and_epoch_logs_match_tensorflow(port):
    assert _flat(port["batches"]) == pytest.approx(_flat(REFERENCE["batches"]), rel=1e-5)
    assert _flat(port["epochs"]) == pytest.approx(_flat(REFERENCE["epochs"]), rel=1e-5)
    assert port["evaluate"] == pytest.approx(REFERENCE["evaluate"], rel=1e-5)


def test_early_stopping_stops_where_tensorflow_does_with_the_best_weights(port):
    assert port["stopped_epoch"] == REFERENCE["stopped_epoch"]
    assert _flat(port["early"]) == pytest.approx(_flat(REFERENCE["early"]), rel=1e-5)
    assert port["early_final"] == pytest.approx(REFERENCE["early_final"], rel=1e-5)


def test_the_learning_rate_schedule_set_from_a_callback(port):
    assert _flat(port["schedule"]) == pytest.approx(_flat(REFERENCE["schedule"]), rel=1e-6)
    assert port["schedule_loss"] == pytest.approx(REFERENCE["schedule_loss"], rel=1e-5)
