"""`examples/migrate_multi_worker.py` (TF guide "Migrate multi-worker CPU/GPU training") beside TF 2.21's run.

TF's outputs: ``round_four.json`` (``migrate_multi_worker``), written by
`tests/tf_reference/generate_round_four.py` from `migrate_multi_worker_tf.py`:
the guide's ``ParameterServerStrategy`` cells on a real in-process TensorFlow
cluster (Keras 2, whose ``fit`` runs under that strategy), and its
``MultiWorkerMirroredStrategy`` alternative (Keras 3), each from the port's
seeded weights with the data in order.

With one worker the parameter-server steps run in a defined order, so every
loss and the evaluation equal TensorFlow's (rtol 1e-5: the two runs differ by
float rounding, ~1e-7; Keras 2's legacy Adagrad and Keras 3's differ by as
little). With the guide's 3 workers which worker runs which step depends on
timing; that run (under ``distrib launch``, real task processes) must train
and end cleanly, and its mirrored part (local) still equals TensorFlow's.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from distrib.comm.secret import new_secret
from distrib.launch import launch
from distrib.launch.result import LaunchTimeoutError
from distrib.testing import run_python

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "migrate_multi_worker.py"
TF = json.loads((ROOT / "tests" / "data" / "tf_reference" / "round_four.json").read_text())["migrate_multi_worker"]
SETTINGS = TF["settings"]
ENV = {"MIGRATE_BUFFER_SIZE": str(SETTINGS["buffer_size"]), "TUTORIAL_WEIGHTS_SEED": str(SETTINGS["weights_seed"]),
       "OMP_NUM_THREADS": "1"}
OWN = ("MIGRATE_BUFFER_SIZE", "TUTORIAL_WEIGHTS_SEED", "MIGRATE_WORKERS")
RTOL = 1e-5


def _printed(out: str, strategy: str) -> dict:
    """``{"losses": [...], "evaluate": {...}}`` as the port printed them for ``strategy``."""
    losses = re.findall(rf"^{strategy} losses: (.*)$", out, re.M)
    evaluate = re.findall(rf"^{strategy} evaluate: (.*)$", out, re.M)
    assert len(losses) == 1 and len(evaluate) == 1, out[-4000:]
    return {"losses": json.loads(losses[0]), "evaluate": json.loads(evaluate[0])}


def _same_as_tensorflow(ours: dict, theirs: dict) -> None:
    assert ours["losses"] == pytest.approx(theirs["losses"], rel=RTOL)
    assert sorted(ours["evaluate"]) == sorted(theirs["evaluate"]) == ["loss"]
    assert ours["evaluate"]["loss"] == pytest.approx(theirs["evaluate"]["loss"], rel=RTOL)


@pytest.mark.timeout(300)
def test_one_worker_prints_tensorflows_numbers():
    """The in-process cluster (the guide's way), 1 worker and 2 ps: both strategies print TF's numbers."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    proc = run_python([str(EXAMPLE)], env={**env, **ENV, "MIGRATE_WORKERS": str(SETTINGS["workers"])}, timeout=280,
                      runtime=OWN)  # read by the example as it runs: it still forks from the preloaded server
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    _same_as_tensorflow(_printed(proc.stdout, "ParameterServerStrategy"), TF["ps"])
    _same_as_tensorflow(_printed(proc.stdout, "MultiWorkerMirroredStrategy"), TF["mwms"])
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_guides_cluster_under_distrib_launch():
    """A chief, the guide's 3 workers and 2 ps as processes: the chief trains and evaluates, all end cleanly."""
    try:
        result = launch(str(EXAMPLE), [], workers=3, chief=True, ps=2, output="capture", timeout=350,
                        grace_seconds=5, env={**ENV, "DISTRIB_JOB_SECRET": new_secret()})
    except LaunchTimeoutError as exc:
        pytest.fail(f"cluster timed out:\n{exc.result.output[-6000:]}")
    assert result.returncode == 0, result.output[-6000:]
    ps = _printed(result.outputs["chief"], "ParameterServerStrategy")
    assert len(ps["losses"]) == 5 and all(map(math.isfinite, ps["losses"])), ps
    assert ps["losses"][-1] < ps["losses"][0] / 5, ps                       # TF's one-worker run: / 28
    assert sorted(ps["evaluate"]) == ["loss"] and ps["evaluate"]["loss"] < TF["ps"]["losses"][0], ps
    _same_as_tensorflow(_printed(result.outputs["chief"], "MultiWorkerMirroredStrategy"), TF["mwms"])
    for task in ("worker 0", "worker 1", "worker 2", "ps 0", "ps 1"):
        assert "Strategy losses" not in result.outputs[task]             # only the coordinator runs the program
    assert "Traceback" not in result.output, result.output[-6000:]
