"""`examples/guide_training_checkpoints.py` (guide "Training checkpoints") beside TensorFlow 2.21's run.

TF's outputs: ``round_four.json`` (``training_checkpoints``), written by
`tests/tf_reference/generate_round_four.py` from `guide_training_checkpoints_tf.py`.
The same program in both: 50 Adam steps saving every 10 with a
`CheckpointManager` (``max_to_keep=3``) that tracks the data iterator, a new
model restoring the latest and going on for 50 more, then `load_checkpoint`.
"""
import json
from pathlib import Path

import pytest

from distrib.testing import run_python

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = json.loads((ROOT / "tests" / "data" / "tf_reference" / "round_four.json").read_text())[
    "training_checkpoints"]


def test_the_port_saves_restores_and_reads_back_what_tensorflow_does(tmp_path):
    # run_python: a fork of the test process's preloaded server where that is exact, else a new process
    proc = run_python([ROOT / "examples" / "guide_training_checkpoints.py", tmp_path / "tf_ckpts"],
                      timeout=200, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert got["restored"] == REFERENCE["restored"] == [None, "ckpt-5"]   # the second run resumed at ckpt-5
    assert got["checkpoints"] == REFERENCE["checkpoints"]
    assert [s[:2] for s in got["saves"]] == [s[:2] for s in REFERENCE["saves"]]
    # 100 Adam steps in float32: the losses agree to 1e-3 (those before the restore to 1e-5)
    assert [s[2] for s in got["saves"][:5]] == pytest.approx([s[2] for s in REFERENCE["saves"][:5]], rel=1e-4)
    assert [s[2] for s in got["saves"]] == pytest.approx([s[2] for s in REFERENCE["saves"]], rel=1e-3)
    assert got["kernel_shape"] == REFERENCE["kernel_shape"] and got["bias_shape"] == REFERENCE["bias_shape"]
    assert got["kernel"][0] == pytest.approx(REFERENCE["kernel"][0], rel=1e-4)
