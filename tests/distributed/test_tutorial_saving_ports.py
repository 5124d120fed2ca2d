"""The ported TF saving tutorials run to the end alone, as Mirrored on 2 CPU replicas, and on 2 launched workers.

Each mode asserts on what the script prints and writes: accuracy above
chance (10 classes), every checkpoint/model/export written once (complete,
no worker temporaries left), and reloaded or exported models predicting what
the trained model predicts.

The Keras tutorial's printed numbers are compared with TensorFlow 2.21's run
of it (``tests/tf_reference/generate_tutorials.py keras``: one CPU for
``alone``, 2 virtual CPUs for the 2-replica modes) from the same seeded
weights (``TUTORIAL_WEIGHTS_SEED``) on the same data in order
(``TUTORIAL_BUFFER_SIZE=1``): the learning rates exactly, each epoch's
accuracy and loss as the progress bar prints them (4 decimals: half a unit of
the last digit, plus rtol 1e-4), the three evaluations to rtol 1e-4 (loss)
and one example (accuracy).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from distrib.checkpoint.files import storage
from distrib.testing import run_python, run_script

pytestmark = pytest.mark.timeout(600)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KERAS = EXAMPLES / "tutorial_keras_distributed.py"
SAVE_LOAD = EXAMPLES / "tutorial_save_and_load.py"
EPOCHS = 4
CHANCE = 0.1
# the Keras tutorial's learning rates under TensorFlow 2.21 (tests/tf_reference/generate_tutorials.py keras)
TF_DATA = Path(__file__).resolve().parents[1] / "data" / "tf_reference"
TF_KERAS = json.loads((TF_DATA / "tutorial_keras_distributed.json").read_text())
TF_SAVE_AND_LOAD = json.loads((TF_DATA / "tutorial_save_and_load.json").read_text())


def _alone(script, tmp_path, env_extra):
    env = dict(os.environ, TMPDIR=str(tmp_path), OMP_NUM_THREADS="1", **env_extra)
    env.pop("TF_CONFIG", None)
    proc = run_python([str(script)], env=env, cwd=str(tmp_path), timeout=560)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout


def _launched(script, tmp_path, env_extra):
    result = run_script(str(script), num_workers=2, cwd=str(tmp_path), timeout=560,
                        env={"TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1", **env_extra})
    assert result.returncode == 0, result.output[-3000:]
    assert "Epoch" not in result.outputs["worker 1"]
    return result.outputs["worker 0"]


def _run(mode, script, tmp_path, examples, epochs=EPOCHS, extra_env=None):
    env = {"TUTORIAL_EXAMPLES": str(examples), "TUTORIAL_EPOCHS": str(epochs), "TUTORIAL_DIR": str(tmp_path),
           **(extra_env or {})}
    if mode == "launch":
        return _launched(script, tmp_path, env), 2
    if mode == "mirrored":
        env["DISTRIB_LOCAL_DEVICES"] = "cpu:0,cpu:1"
        return _alone(script, tmp_path, env), 2
    return _alone(script, tmp_path, env), 1


def _epoch_logs(out):
    """``[{name: value}, ...]``: what each epoch's progress bar prints last, every ``fit`` in order."""
    epochs = []
    for block in re.split(r"^Epoch \d+/\d+$", out, flags=re.M)[1:]:
        bar = next(line for line in block.splitlines() if "━" in line).split("\r")[-1]
        epochs.append({k: float(v) for k, v in re.findall(r" - (\w+): ([-+.\deE]+)", bar)})
    return epochs


def _printed(value, reference):
    """A number printed with 4 decimals (as Keras's progress bar does) equals ``reference`` to float tolerance."""
    return abs(value - reference) <= 5e-5 + 1e-4 * abs(reference)


def _assert_histories(printed, histories):
    """``printed`` epoch logs are TensorFlow's ``histories`` (dicts of per-epoch lists), one after another."""
    expected = [{k: v[i] for k, v in h.items() if k != "learning_rate"}
                for h in histories for i in range(len(h["loss"]))]
    assert len(printed) == len(expected), (printed, expected)
    for ours, theirs in zip(printed, expected):
        assert ours.keys() == theirs.keys() and all(_printed(ours[k], theirs[k]) for k in ours), (printed, expected)


def _assert_keras_matches_tensorflow(out, evals, replicas):
    tf = TF_KERAS["alone" if replicas == 1 else "mirrored_2_devices"]
    examples = TF_KERAS["settings"]["examples_per_replica"] * replicas
    assert tf["devices"] == replicas
    _assert_histories(_epoch_logs(out), [tf["history"]])
    assert len(evals) == len(tf["evaluations"])
    for (loss, accuracy), (tf_loss, tf_accuracy) in zip(evals, tf["evaluations"]):
        assert float(loss) == pytest.approx(tf_loss, rel=1e-4), (evals, tf["evaluations"])
        assert float(accuracy) == pytest.approx(tf_accuracy, abs=1 / examples + 1e-9), (evals, tf["evaluations"])


def _tf_env(reference, replicas):
    settings = reference["settings"]
    return {"TUTORIAL_EXAMPLES": str(settings["examples_per_replica"] * replicas),
            "TUTORIAL_EPOCHS": str(settings["epochs"]), "TUTORIAL_BUFFER_SIZE": "1",
            "TUTORIAL_WEIGHTS_SEED": str(settings["weights_seed"])}


def _complete(path):
    assert storage.is_complete(str(path)), f"{path} is not a complete save"


def _no_worker_temporaries(tmp_path):
    assert not [p for p in tmp_path.rglob("*") if "workertemp" in p.name or ".tmp-" in p.name]


MODES = ["alone", pytest.param("mirrored", marks=pytest.mark.slow), pytest.param("launch", marks=pytest.mark.slow)]


@pytest.mark.parametrize("mode", MODES)
def test_keras_distributed_tutorial(mode, tmp_path):
    replicas = 1 if mode == "alone" else 2
    out, _ = _run(mode, KERAS, tmp_path, 512 * replicas, extra_env=_tf_env(TF_KERAS, replicas))
    assert f"Number of devices: {replicas}" in out
    lrs = re.findall(r"Learning rate for epoch (\d+) is (\S+)", out)
    assert [[int(e), float(v)] for e, v in lrs] == TF_KERAS["learning rates"]     # what TF 2.21 prints
    names = [f"ckpt_{e}" for e in range(1, EPOCHS + 1)]
    assert f"checkpoints: {names}" in out
    assert sorted(os.listdir(tmp_path / "training_checkpoints")) == names
    for name in names:
        _complete(tmp_path / "training_checkpoints" / name)
    _complete(tmp_path / "my_model.keras")
    _complete(tmp_path / "exported_model")
    _no_worker_temporaries(tmp_path)
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path / "logs" / "train"))
    evals = re.findall(r"Eval loss: (\S+), Eval [Aa]ccuracy: (\S+)", out)
    assert len(evals) == 3
    # reloaded models evaluate like the trained one (one process sums the batches in another order: float tolerance)
    assert [float(a) for _, a in evals] == [float(evals[0][1])] * 3, evals
    assert [float(l) for l, _ in evals] == pytest.approx([float(evals[0][0])] * 3, rel=1e-6), evals
    assert float(evals[0][1]) > 2 * CHANCE
    assert "served predictions match: True" in out
    _assert_keras_matches_tensorflow(out, evals, replicas)


@pytest.mark.parametrize("mode", MODES)
def test_save_and_load_tutorial(mode, tmp_path):
    replicas = 1 if mode == "alone" else 2
    out, _ = _run(mode, SAVE_LOAD, tmp_path, 512 * replicas, 2, extra_env=_tf_env(TF_SAVE_AND_LOAD, replicas))
    accuracies = [float(a) for a in re.findall(r"sparse_categorical_accuracy: ([\d.]+)", out)]
    # the model, then (outside any scope, as in TF) the restored model and the OneDeviceStrategy one: 2 epochs each
    assert len(re.findall(r"^Epoch 1/2", out, re.M)) == 4      # + the subclassed model
    assert max(accuracies) > 2 * CHANCE
    assert "restored predictions match: True" in out
    assert "exported predictions match: True" in out
    assert "Export without a signature failed: saved_model.save(" in out and "input_signature=" in out
    assert "subclassed signatures: ['serving_default']" in out
    assert re.search(r"distributed inference outputs per replica: \[\(\d+, 10\)", out)
    losses = [float(v) for v in re.search(r"subclassed fit losses: \[(.*)\]", out).group(1).split(",")]
    assert len(losses) == 2 and losses[1] < losses[0]
    assert "subclassed model saved: True" in out
    for name in ("keras_save.keras", "tf_save", "subclassed", "subclassed.keras"):
        _complete(tmp_path / name)
    assert sorted(os.listdir(tmp_path / "tf_save")) == ["COMPLETE", "MANIFEST.json", "program.json",
                                                       "signature.json", "weights.safetensors"]
    _no_worker_temporaries(tmp_path)
    # TensorFlow's numbers: every fit (the model, restored outside any scope, restored under OneDeviceStrategy,
    # the subclassed model) epoch by epoch, and the exported fresh model's accuracy
    tf = TF_SAVE_AND_LOAD["alone" if replicas == 1 else "mirrored_2_devices"]
    assert tf["devices"] == replicas
    _assert_histories(_epoch_logs(out), [tf["fit"], tf["restored fit"], tf["one device fit"], tf["subclassed fit"]])
    assert _printed(float(re.search(r"exported accuracy: (\S+)", out).group(1)), tf["exported accuracy"])
    assert losses == [round(v, 4) for v in tf["subclassed fit"]["loss"]]
