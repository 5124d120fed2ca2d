"""A side-car evaluator beside a real 2-worker MultiWorkerMirrored job (`distrib launch --evaluator`).

Shown: it evaluates every checkpoint of the job exactly once (state file and
TensorBoard events), a SIGKILL in the middle of an evaluation neither stops
training nor makes a restarted evaluator repeat or miss a checkpoint, and the
workers' final weights are those of the same job without an evaluator.
The job-level tests take a minute or more each on a shared 2-core machine,
so they are ``slow`` (run them with ``-m slow``); the launcher's tolerance of a
failed evaluator is checked in the default run.
"""
from __future__ import annotations

import json
import os

import pytest

from distrib.testing import free_port, run_python, run_script

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(os.name != "posix", reason="POSIX only")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "guide_sidecar_evaluator.py")
KILL_HELPER = os.path.join(ROOT, "tests", "distributed", "sidecar_kill_helper.py")
EPOCHS = 3
NAMES = [f"ckpt-{n}" for n in range(1, EPOCHS + 1)]


def _env(work, weights=None, **extra):
    env = {"SIDECAR_DIR": str(work), "SIDECAR_EPOCHS": str(EPOCHS)}
    if weights is not None:
        env["SIDECAR_WEIGHTS"] = str(weights)
    env.update(extra)
    return env


def _evaluated(work):
    with open(os.path.join(work, "logs", "eval", "sidecar_state.json"), encoding="utf-8") as f:
        return [e["checkpoint"] for e in json.load(f)["evaluated"]]


def _tensorboard_steps(work, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(os.path.join(work, "logs", "eval"))
    acc.Reload()
    return [event.step for event in acc.Scalars(tag)]


def _load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def baseline_weights(tmp_path_factory):
    """The final weights of the same 2-worker job with no evaluator."""
    work = tmp_path_factory.mktemp("baseline")
    result = run_script(EXAMPLE, num_workers=2, env=_env(work, work / "weights.json"), timeout=240)
    assert result.ok, result.output
    return _load(work / "weights.json")


@pytest.mark.slow
def test_evaluator_sees_every_checkpoint_once_and_changes_nothing(tmp_path, baseline_weights):
    result = run_script(EXAMPLE, num_workers=2, evaluator=True, timeout=240,
                        env=_env(tmp_path, tmp_path / "weights.json"))
    assert result.ok, result.output
    assert result.tasks["evaluator"].returncode == 0
    assert _evaluated(tmp_path) == NAMES
    assert _tensorboard_steps(tmp_path, "loss") == list(range(1, EPOCHS + 1))
    assert _tensorboard_steps(tmp_path, "accuracy") == list(range(1, EPOCHS + 1))
    assert "SidecarEvaluator: evaluated ckpt-1:" in result.outputs["evaluator"]
    assert _load(tmp_path / "weights.json") == baseline_weights


@pytest.mark.slow
def test_killed_evaluator_neither_stops_training_nor_repeats_after_restart(tmp_path, baseline_weights):
    result = run_script(KILL_HELPER, num_workers=2, evaluator=True, timeout=240,
                        env=_env(tmp_path, tmp_path / "weights.json", SIDECAR_KILL="1"))
    assert result.ok, result.output  # training finished although the evaluator died
    assert result.tasks["evaluator"].returncode == -9
    assert "evaluator was killed by SIGKILL; training goes on without it" in result.output
    assert _evaluated(tmp_path) == ["ckpt-1"]  # killed half-way through ckpt-2: not recorded
    assert _load(tmp_path / "weights.json") == baseline_weights

    # Restart the evaluator alone, beside the (finished) cluster, as a user would.
    tf_config = {"cluster": {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]},
                 "task": {"type": "evaluator", "index": 0}}
    env = dict(os.environ, TF_CONFIG=json.dumps(tf_config), OMP_NUM_THREADS="1", **_env(tmp_path))
    proc = run_python([KILL_HELPER], env=env, timeout=200, runtime=tuple(_env(tmp_path)))  # forked where exact
    assert proc.returncode == 0, proc.stderr
    assert "evaluated ckpt-1" not in proc.stdout
    assert _evaluated(tmp_path) == NAMES  # none twice, none missed
    assert _tensorboard_steps(tmp_path, "loss") == list(range(1, EPOCHS + 1))


@pytest.mark.slow
def test_evaluator_beside_a_parameter_server_job_reads_the_chiefs_checkpoints(tmp_path):
    from distrib.launch import launch

    script = os.path.join(ROOT, "tests", "distributed", "sidecar_ps_job.py")
    result = launch(script, chief=True, workers=1, ps=1, evaluator=True, output="capture",
                    timeout=240, grace_seconds=5, env={"SIDECAR_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"})
    assert result.ok, result.output
    assert result.tasks["evaluator"].returncode == 0
    assert _evaluated(tmp_path) == NAMES


def test_a_failing_evaluator_does_not_fail_the_launch(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "import json, os, sys\n"
        "task = json.loads(os.environ['TF_CONFIG'])['task']\n"
        "sys.exit(3 if task['type'] == 'evaluator' else 0)\n")
    result = run_script(str(script), num_workers=2, evaluator=True, timeout=60)
    assert result.ok, result.output
    assert result.tasks["evaluator"].returncode == 3
    assert result.tasks["worker 0"].returncode == 0 and result.tasks["worker 1"].returncode == 0
    assert "evaluator failed with exit code 3; training goes on without it" in result.output
