"""An elastic job of any size from one worker up and back (issue 40): 2 -> 1 -> 2, and 1 -> 2 from the start.

Two real workers under ``distrib launch --elastic`` run the programs of
`resize_scripts` (a model with BatchNorm and Dropout, `fit` with
`BackupAndRestore` or a custom loop with `CheckpointManager`). A one-worker
job takes the multi-replica path (its collectives, global-batch dropout and
statistics), so a worker that joins it replays its steps from the chief's log,
and every result equals the fixed-size two-worker run's, to float tolerance
(the gradient sums are added in another order).
"""
import json

import pytest
import torch

from distrib.checkpoint.files.format import load_state
from distrib.launch import launch
from distrib.launch.result import LaunchTimeoutError
from resize_scripts import CTL_SCRIPT, FIT_SCRIPT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WORKERS = 2


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    root = tmp_path_factory.mktemp("one_worker")
    paths = {}
    for name, text in (("fit", FIT_SCRIPT), ("ctl", CTL_SCRIPT)):
        paths[name] = root / f"one_worker_{name}.py"
        paths[name].write_text(text.lstrip("\n"), encoding="utf-8")
    return paths


def _run(script, out, leaver=-1, step=-1, wait_step=-1, start_workers=None, rejoins=0):
    out.mkdir()
    try:
        result = launch(str(script), [str(out), leaver, step, wait_step], workers=WORKERS, elastic=True,
                        max_restarts=1, rejoins=rejoins, output="capture", timeout=400, grace_seconds=5,
                        start_workers=start_workers)
    except LaunchTimeoutError as exc:
        pytest.fail(f"the job did not end in time:\n{(exc.result.output or '')[-8000:]}")
    assert result.returncode == 0, result.output[-6000:]
    assert (result.replacements, result.restarts) == (0, 0), result.output[-4000:]
    tasks = [t for t in range(WORKERS) if (out / f"final-{t}.safetensors").exists()]
    finals = {t: load_state(str(out / f"final-{t}.safetensors")) for t in tasks}
    extras = {t: json.loads((out / f"extra-{t}.json").read_text()) for t in tasks}
    return result, finals, extras


def _close(a, b):
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a)


@pytest.fixture(scope="module")
def reference(scripts, tmp_path_factory):
    """Runs that keep two workers throughout."""
    refs = {}
    for name in ("fit", "ctl"):
        _, finals, extras = _run(scripts[name], tmp_path_factory.mktemp(f"fixed-{name}") / "out")
        refs[name] = (finals[0], extras[0]["extra"])
    return refs


def _same_result(name, finals, extras, reference, replicas):
    fixed_weights, fixed_extra = reference[name]
    for task, weights in finals.items():
        assert extras[task]["replicas"] == replicas
        assert _close(weights, fixed_weights), f"worker {task}'s weights differ from the fixed-size run"
    if name == "ctl":  # a metric over every example: none lost when the job shrank, none counted twice
        assert extras[0]["extra"]["mean"] == pytest.approx(fixed_extra["mean"], rel=1e-5)
    else:
        for key in fixed_extra:
            assert extras[0]["extra"][key] == pytest.approx(fixed_extra[key], rel=1e-5), key


@pytest.mark.parametrize("name", ["fit", "ctl"])
def test_a_job_started_with_one_worker_grows_to_two_and_keeps_the_fixed_size_result(scripts, reference,
                                                                                    tmp_path, name):
    """``--workers 1:2``: worker 0 trains alone; worker 1 joins the running job after step 4 (the chief waits)."""
    result, finals, extras = _run(scripts[name], tmp_path / "out", wait_step=4, start_workers=1)
    assert "worker 1 (" in result.output and "asks to join the running job" in result.output
    assert "joined; the job goes on with 2 workers (was 1)" in result.output, result.output[-4000:]
    assert sorted(finals) == [0, 1]
    _same_result(name, finals, extras, reference, 2)


@pytest.mark.parametrize("name,leave_step,wait_step", [("fit", 6, 10), ("ctl", 4, 7)])
def test_a_two_worker_job_shrinks_to_one_and_grows_back_keeping_the_fixed_size_result(scripts, reference, tmp_path,
                                                                                     name, leave_step, wait_step):
    """Worker 1 leaves (the job goes on with worker 0 alone) and is started again to rejoin (``--rejoins 1``)."""
    result, finals, extras = _run(scripts[name], tmp_path / "out", 1, leave_step, wait_step=wait_step, rejoins=1)
    assert "left; the job goes on with 1 worker (was 2)" in result.output, result.output[-4000:]
    assert "joined; the job goes on with 2 workers (was 1)" in result.output, result.output[-4000:]
    assert sorted(finals) == [0, 1]
    _same_result(name, finals, extras, reference, 2)


def test_a_worker_that_leaves_for_good_leaves_the_chief_to_finish_alone_with_the_fixed_size_result(
        scripts, reference, tmp_path):
    result, finals, extras = _run(scripts["ctl"], tmp_path / "out", 1, 4)
    assert "left; the job goes on with 1 worker" in result.output, result.output[-4000:]
    assert sorted(finals) == [0]
    _same_result("ctl", finals, extras, reference, 1)
