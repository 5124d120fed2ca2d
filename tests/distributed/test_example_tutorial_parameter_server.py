"""examples/tutorial_parameter_server.py (TF's parameter-server tutorial) runs both ways it documents.

With one worker (the only case whose order does not depend on timing) every
number it prints is compared with TensorFlow 2.21's computation of the same
steps (``tests/tf_reference/generate_tutorials.py parameter_server``; why on
TensorFlow's default strategy and with dense embedding gradients is said
there): same seeded initial weights (``TUTORIAL_WEIGHTS_SEED``), datasets in
order (``TUTORIAL_BUFFER_SIZE=1``). Numbers printed with 4 or 6 decimals are
compared to half a unit of the last decimal plus rtol 1e-4.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from distrib.testing import run_python

from distrib.comm.secret import new_secret
from distrib.launch import launch
from distrib.launch.result import LaunchTimeoutError

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "tutorial_parameter_server.py")
SHORT = {"TUTORIAL_PS_WORKERS": "2", "TUTORIAL_PS_FIT_EPOCHS": "2", "TUTORIAL_PS_CTL_EPOCHS": "4",
         "OMP_NUM_THREADS": "1"}


TF = json.loads((Path(__file__).resolve().parents[1] / "data" / "tf_reference" /
                 "tutorial_parameter_server.json").read_text())
ONE_WORKER = {**SHORT, "TUTORIAL_PS_WORKERS": "1", "TUTORIAL_BUFFER_SIZE": "1",
              "TUTORIAL_PS_FIT_EPOCHS": str(TF["settings"]["fit_epochs"]),
              "TUTORIAL_PS_CTL_EPOCHS": str(TF["settings"]["ctl_epochs"]),
              "TUTORIAL_WEIGHTS_SEED": str(TF["settings"]["weights_seed"])}


def _printed(text: str, reference: float, decimals: int) -> bool:
    return abs(float(text) - reference) <= 0.5 * 10 ** -decimals + 1e-4 * abs(reference)


def _check_against_tensorflow(out: str) -> None:
    tf = TF["one_worker"]
    fit = out.split("Model.fit losses: ")[1].splitlines()[0].split(", ")
    assert len(fit) == len(tf["fit losses"]) and all(map(_printed, fit, tf["fit losses"], [4] * len(fit))), fit
    accuracies = [line.rsplit(" ", 1)[1].rstrip(".") for line in out.splitlines() if line.startswith("Finished epoch")]
    assert len(accuracies) == len(tf["epoch accuracies"]), out[-4000:]
    assert all(map(_printed, accuracies, tf["epoch accuracies"], [6] * len(accuracies))), accuracies
    assert _printed(out.split("Final loss is ")[1].split()[0], tf["final loss"], 6), out[-2000:]
    evaluations = [line.split(": ")[1] for line in out.splitlines() if line.startswith("Evaluation accuracy")]
    assert len(evaluations) == 2 and all(map(_printed, evaluations, tf["evaluation accuracies"], [6, 6]))


def _check(out: str) -> None:
    fit = [float(v) for v in out.split("Model.fit losses: ")[1].splitlines()[0].split(", ")]
    assert len(fit) == 2 and fit[-1] < fit[0], out[-4000:]
    assert "('/job:ps/replica:0/task:0/device:CPU:0', '/job:ps/replica:0/task:1/device:CPU:0')" in out
    accuracies = [float(line.rsplit(" ", 1)[1].rstrip(".")) for line in out.splitlines()
                  if line.startswith("Finished epoch")]
    assert len(accuracies) == 4 and accuracies[-1] >= 0.9, out[-4000:]
    assert float(out.split("Final loss is ")[1].split()[0]) < 0.3
    evaluations = [float(line.split(": ")[1]) for line in out.splitlines() if line.startswith("Evaluation accuracy")]
    assert len(evaluations) == 2 and min(evaluations) >= 0.9, out[-4000:]


def _in_process(env: dict) -> str:
    """The chief's output: the example started plainly, its own in-process cluster."""
    base = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    proc = run_python([EXAMPLE], env={**base, **env}, timeout=350)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return proc.stdout


def _launched(env: dict) -> str:
    """The chief's output under ``distrib launch --chief --workers N --ps 2``."""
    try:
        result = launch(EXAMPLE, [], workers=int(env["TUTORIAL_PS_WORKERS"]), chief=True, ps=2, output="capture",
                        timeout=350, grace_seconds=5, env={**env, "DISTRIB_JOB_SECRET": new_secret()})
    except LaunchTimeoutError as exc:
        pytest.fail(f"cluster timed out:\n{exc.result.output[-6000:]}")
    assert result.returncode == 0, result.output[-6000:]
    return result.outputs["chief"]


RUNS = [pytest.param(_in_process, id="in_process_cluster"), pytest.param(_launched, id="distrib_launch")]


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("run", RUNS)
def test_tutorial_runs(run):
    _check(run(SHORT))


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("run", RUNS)
def test_one_worker_prints_tensorflows_numbers(run):
    _check_against_tensorflow(run(ONE_WORKER))


def test_tensorflows_indexed_slices_step_is_not_rmsprops():
    """Why TensorFlow's reference densifies the embedding gradient: with its IndexedSlices, the same program differs."""
    ours, as_written = TF["one_worker"], TF["one_worker_indexed_slices"]
    assert ours["fit losses"] == as_written["fit losses"]             # no embedding there
    assert abs(ours["final loss"] - as_written["final loss"]) > 1e-3 * ours["final loss"]


@pytest.mark.timeout(60)
def test_model_fit_section_with_the_tutorials_targets():
    """The tutorial's Model.fit cell as TF writes it: targets (64,), outputs (64, 10), loss "mse".

    Keras broadcasts the targets as (64, 1) against the outputs; one SGD step's
    loss is computed here from the same weights, the Keras way.
    """
    import numpy as np
    import torch

    import distrib

    torch.manual_seed(0)
    x, y = torch.rand((64, 10)), torch.rand((64,))
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(10, 10)))
    model.compile(distrib.optimizers.SGD(), loss="mse")
    outputs = model.predict(x.numpy(), batch_size=64, verbose=0)
    expected = float(np.mean((y.numpy()[:, None] - outputs) ** 2))
    history = model.fit(x.numpy(), y.numpy(), batch_size=64, epochs=1, shuffle=False, verbose=0)
    assert history.history["loss"][0] == pytest.approx(expected, rel=1e-5)
