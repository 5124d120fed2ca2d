"""Resizing a running elastic job: a worker leaves at an agreed step, the others go on, the result is unchanged.

3 real workers under ``distrib launch --elastic``; one calls
``distrib.comm.elastic.request_leave()`` during a step. Every worker learns it
at that step's end (one agreed vote), the leaver exits 0, the other two
rebuild their groups and split the *same* global batches two ways. Their final
weights (and, under ``fit``, the logged history) must equal those of a run
that kept 3 workers throughout, to float tolerance (summation order differs).
The models have BatchNorm (global-batch statistics) and Dropout (global-batch
dropout), whose results would otherwise depend on the number of workers. (The
linear layer before the BatchNorm has no bias: its gradient is zero up to
rounding, and Adam would turn that rounding noise into full-size steps.)
"""
import json

import pytest
import torch

from distrib.checkpoint.files.format import load_state
from distrib.launch import launch
from distrib.launch.result import LaunchTimeoutError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WORKERS = 3

from resize_scripts import CTL_SCRIPT, FIT_SCRIPT


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    root = tmp_path_factory.mktemp("resize")
    paths = {}
    for name, text in (("fit", FIT_SCRIPT), ("ctl", CTL_SCRIPT)):
        paths[name] = root / f"resize_{name}.py"
        paths[name].write_text(text.lstrip("\n"), encoding="utf-8")
    return paths


def _run(script, out, leaver=-1, step=-1, wait_step=-1, start_workers=None, env=None, replacements=0):
    out.mkdir()
    rejoin = wait_step >= 0
    try:
        result = launch(str(script), [str(out), leaver, step, wait_step], workers=WORKERS, elastic=True,
                        max_restarts=1, rejoins=1 if rejoin and start_workers is None else 0, output="capture",
                        timeout=400, grace_seconds=5, start_workers=start_workers, env=env)
    except LaunchTimeoutError as exc:
        pytest.fail(f"the job did not end in time:\n{(exc.result.output or '')[-8000:]}")
    assert result.returncode == 0, result.output[-6000:]
    assert (result.replacements, result.restarts) == (replacements, 0), result.output[-4000:]
    late = env is not None and "START_AFTER" in env
    tasks = [t for t in range(WORKERS) if (t != leaver or rejoin) and not (late and t == 2)]
    finals = {t: load_state(str(out / f"final-{t}.safetensors")) for t in tasks}
    extras = {t: json.loads((out / f"extra-{t}.json").read_text()) for t in tasks}
    return result, finals, extras


def _close(a, b):
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a)


@pytest.fixture(scope="module")
def reference(scripts, tmp_path_factory):
    """Runs that keep 3 workers throughout."""
    refs = {}
    for name in ("fit", "ctl"):
        out = tmp_path_factory.mktemp(f"fixed-{name}") / "out"
        _, finals, extras = _run(scripts[name], out)
        refs[name] = (finals[0], extras[0]["extra"])
    return refs


@pytest.mark.parametrize("name,leaver,step", [("fit", 1, 10), ("ctl", 2, 4)])
def test_a_worker_leaving_mid_job_keeps_the_result_of_a_fixed_size_run(scripts, reference, tmp_path, name,
                                                                        leaver, step):
    result, finals, extras = _run(scripts[name], tmp_path / "out", leaver, step)
    assert not (tmp_path / "out" / f"final-{leaver}.safetensors").exists(), "the leaver went on after its step"
    assert f"worker {leaver}" in result.output and "left; the job goes on with 2 workers (was 3)" in result.output
    assert f"distrib launch: worker {leaver} left the job (exit 0)" in result.output
    for task, weights in finals.items():
        assert extras[task]["replicas"] == 2
        assert _close(weights, reference[name][0]), f"worker {task}'s weights differ from the fixed-size run"
    if name == "ctl":  # a metric's sums: the replacement's share since the snapshot counted once, none lost
        for task in finals:
            assert extras[task]["extra"]["mean"] == pytest.approx(reference[name][1]["mean"], rel=1e-5)
    if name == "fit":
        history, fixed = extras[0]["extra"], reference[name][1]
        assert history.keys() == fixed.keys()
        for key in fixed:
            assert history[key] == pytest.approx(fixed[key], rel=1e-5), key
    else:
        assert extras[0]["extra"] == pytest.approx(reference[name][1], rel=1e-5)


def test_a_worker_rejoining_a_custom_loop_keeps_the_result_of_a_fixed_size_run(scripts, reference, tmp_path):
    """Custom loop, 3 -> 2 -> 3: worker 1 leaves after step 4 and rejoins at the first step after a save().

    The joiner restores the chief's snapshot (older than the step that admitted it) and replays
    that step from the chief's log, the admitting vote included.
    """
    result, finals, extras = _run(scripts["ctl"], tmp_path / "out", 1, 4, wait_step=7)
    assert "joined; the job goes on with 3 workers (was 2)" in result.output, result.output[-4000:]
    assert "joined the running job (generation 2, replica 1 of 3)" in result.output, result.output[-4000:]
    fixed_weights, fixed_losses = reference["ctl"]
    for task, weights in finals.items():
        assert extras[task]["replicas"] == 3
        assert _close(weights, fixed_weights), f"worker {task}'s weights differ from the fixed-size run"
    assert extras[0]["extra"] == pytest.approx(fixed_losses, rel=1e-5)
    joined = extras[1]["extra"]  # from the step its snapshot was taken before: the job's (global) losses
    assert joined and "17" in joined
    assert joined == pytest.approx({step: fixed_losses[step] for step in joined}, rel=1e-5)


def test_a_worker_leaving_and_rejoining_keeps_the_result_of_a_fixed_size_run(scripts, reference, tmp_path):
    """3 -> 2 -> 3: worker 1 leaves after step 6; the launcher starts it again; it is admitted by step 11.

    The step it is admitted at depends on how fast it starts; the result must not.
    """
    result, finals, extras = _run(scripts["fit"], tmp_path / "out", 1, 6, wait_step=10)
    assert "worker 1 (" in result.output and "left; the job goes on with 2 workers (was 3)" in result.output
    assert "joined; the job goes on with 3 workers (was 2)" in result.output, result.output[-4000:]
    assert "starting it again to rejoin the running job" in result.output
    assert sorted(finals) == [0, 1, 2]
    for task, weights in finals.items():
        assert extras[task]["replicas"] == 3
        assert _close(weights, reference["fit"][0]), f"worker {task}'s weights differ from the fixed-size run"
    fixed = reference["fit"][1]
    for key in fixed:
        assert extras[0]["extra"][key] == pytest.approx(fixed[key], rel=1e-5), key
        # the rejoined worker's History holds the epochs it ended; its logs are the job's (global) ones
        joined = extras[1]["extra"][key]
        assert joined and joined == pytest.approx(fixed[key][-len(joined):], rel=1e-5), key


@pytest.mark.parametrize("name", ["fit", "ctl"])
def test_a_job_started_with_fewer_workers_grows_without_changing_the_result(scripts, reference, tmp_path, name):
    """``distrib launch --workers 2:3``: workers 0 and 1 start training; worker 2 joins the running job.

    The chief waits (at step 4) until worker 2 asks, so it joins mid-run whatever its start-up time.
    """
    result, finals, extras = _run(scripts[name], tmp_path / "out", wait_step=4, start_workers=2)
    assert "worker 2 (" in result.output and "asks to join the running job" in result.output
    assert "joined; the job goes on with 3 workers (was 2)" in result.output, result.output[-4000:]
    fixed_weights = reference[name][0]
    for task, weights in finals.items():
        assert extras[task]["replicas"] == 3
        assert _close(weights, fixed_weights), f"worker {task}'s weights differ from the fixed-size run"
    if name == "ctl":  # the joiner's replayed steps are not counted again in a metric
        assert extras[0]["extra"]["mean"] == pytest.approx(reference[name][1]["mean"], rel=1e-5)


def test_a_worker_that_comes_up_after_the_job_ended_ends_nothing(scripts, reference, tmp_path):
    """``--workers 2:3`` where worker 2 starts only once worker 0 saved its final weights.

    It finds the job ended (exit 0, "nothing to do") or its store already gone (an error exit the
    launcher reports as a task that never joined): either way the job succeeds with 2 workers.
    """
    out = tmp_path / "out"
    result, finals, extras = _run(scripts["ctl"], out, start_workers=2,
                                  env={"START_AFTER": str(out / "extra-0.json")})
    ended = "the job ended before it could join; nothing to do"
    too_late = "worker 2 failed with exit code 1 before it joined the running job"
    assert ended in result.output or too_late in result.output, result.output[-3000:]
    assert "joined; the job goes on" not in result.output
    assert sorted(finals) == [0, 1]
    for task, weights in finals.items():
        assert extras[task]["replicas"] == 2
        assert _close(weights, reference["ctl"][0])


@pytest.mark.parametrize("name,leave_step,kill_step", [("fit", 6, 12), ("ctl", 4, 13)])
def test_a_worker_lost_after_the_job_shrank_is_replaced_and_the_result_is_kept(scripts, reference, tmp_path, name,
                                                                               leave_step, kill_step):
    """3 -> 2 (worker 1 leaves), then worker 2 -- replica 1 of 2 now -- is SIGKILLed.

    The launcher starts worker 2 again; it learns from the generation the survivors open that it
    is replica 1 of 2, restores the newest snapshot taken since the resize and catches up.
    """
    result, finals, extras = _run(scripts[name], tmp_path / "out", 1, leave_step, env={"KILL_AT": f"2:{kill_step}"},
                                  replacements=1)
    assert "left; the job goes on with 2 workers (was 3)" in result.output
    assert "worker 2 was killed by SIGKILL; starting a replacement for it alone" in result.output
    assert "generation 2 formed" in result.output, result.output[-4000:]
    for task, weights in finals.items():
        assert extras[task]["replicas"] == 2
        assert _close(weights, reference[name][0]), f"worker {task}'s weights differ from the fixed-size run"
    if name == "ctl":  # a metric's sums: the replacement's share since the snapshot counted once, none lost
        for task in finals:
            assert extras[task]["extra"]["mean"] == pytest.approx(reference[name][1]["mean"], rel=1e-5)


@pytest.mark.parametrize("name,leave_step,kill_step", [("fit", 6, 12), ("ctl", 4, 13)])
def test_the_chief_lost_after_the_job_shrank_is_replaced_and_the_result_is_kept(scripts, reference, tmp_path, name,
                                                                             leave_step, kill_step):
    """3 -> 2 (worker 1 leaves), then the chief is SIGKILLed: the launcher hosts the job's store, so it is
    replaced like any worker; its metric sums (folded onto it before each snapshot) come back with it."""
    result, finals, extras = _run(scripts[name], tmp_path / "out", 1, leave_step, env={"KILL_AT": f"0:{kill_step}"},
                                  replacements=1)
    assert "worker 0 was killed by SIGKILL; starting a replacement for it alone" in result.output
    assert "generation 2 formed" in result.output, result.output[-4000:]
    for task, weights in finals.items():
        assert extras[task]["replicas"] == 2
        assert _close(weights, reference[name][0]), f"worker {task}'s weights differ from the fixed-size run"
    if name == "ctl":
        for task in finals:
            assert extras[task]["extra"]["mean"] == pytest.approx(reference[name][1]["mean"], rel=1e-5)
    else:  # the chief's replacement's History holds the epochs it ended (it resumed from a snapshot)
        for key, values in reference[name][1].items():
            ended = extras[0]["extra"][key]
            assert ended and ended == pytest.approx(values[-len(ended):], rel=1e-5), key


@pytest.mark.parametrize("name,leave_step,kill_step", [("fit", 10, -1), ("ctl", 4, 13)])
def test_workers_with_two_local_replicas_each_resize_and_are_replaced_keeping_the_result(scripts, reference,
                                                                                     tmp_path, name, leave_step,
                                                                                     kill_step):
    """3 workers x 2 local replicas: worker 1 leaves (6 -> 4 replicas), then (ctl) worker 2 is SIGKILLed.

    The same global batches, split 6 then 4 ways, give the 3-worker, 1-replica run's weights.
    """
    env = {"DISTRIB_LOCAL_DEVICES": "cpu:0,cpu:1"}
    if kill_step >= 0:
        env["KILL_AT"] = f"2:{kill_step}"
    result, finals, extras = _run(scripts[name], tmp_path / "out", 1, leave_step, env=env,
                                  replacements=int(kill_step >= 0))
    assert "replica 1 (cpu:1) left; the job goes on with 4 replicas (was 6)" in result.output, result.output[-4000:]
    if kill_step >= 0:
        assert "worker 2 was killed by SIGKILL; starting a replacement for it alone" in result.output
        assert "generation 2 formed" in result.output, result.output[-4000:]
    for task, weights in finals.items():
        assert extras[task]["replicas"] == 4
        assert _close(weights, reference[name][0]), f"worker {task}'s weights differ from the fixed-size run"
    if name == "ctl":
        for task in finals:
            assert extras[task]["extra"]["mean"] == pytest.approx(reference[name][1]["mean"], rel=1e-5)
