"""Parameter-server training when tasks die: workers are replaced, a lost ps or chief is named.

The launcher ends a whole job when any task dies, so these tests start the
tasks themselves (real processes on 127.0.0.1, ports picked at run time,
``TF_CONFIG`` as the launcher writes it) and kill one with SIGKILL. The
moments are agreed through marker files in a temporary directory: a task
writes one when it reaches a point, the test waits for it (bounded), acts,
and writes another to let the task go on.
"""
from __future__ import annotations

import json
import os
import signal
import sys

import pytest
from ps_task_harness import await_marker as _await_marker
from ps_task_harness import cluster_starter
from ps_task_harness import marker as _marker

HERE = os.path.abspath(__file__)
WAIT = 120.0


@pytest.fixture
def start_cluster(tmp_path):
    """``start_cluster(scenario, workers, ps, skip=(), timeout_seconds=20)`` (see ps_task_harness)."""
    with cluster_starter(tmp_path, HERE, wait=WAIT) as start:
        def start_with_timeout(scenario: str, workers: int = 2, ps: int = 1, skip: tuple = (),
                               timeout_seconds: float = 20):
            return start(scenario, workers=workers, ps=ps, skip=skip,
                         env={"PS_TEST_TIMEOUT": str(timeout_seconds)})
        yield start_with_timeout


# --------------------------------------------------------------- scenarios
def _setup(partitioned: bool = False):
    import torch

    import distrib
    from distrib.coordinator import ClusterCoordinator
    from distrib.strategies.parameter_server import ParameterServerStrategy

    options = distrib.CommunicationOptions(timeout_seconds=float(os.environ["PS_TEST_TIMEOUT"]))
    strategy = ParameterServerStrategy(communication_options=options)
    torch.manual_seed(0)
    x = torch.randn(512, 3)
    y = x @ torch.tensor([[2.0], [-1.0], [0.5]]) + 0.1 * torch.randn(512, 1)
    with strategy.scope():
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    coordinator = ClusterCoordinator(strategy)
    iterator = iter(coordinator.create_per_worker_dataset(
        lambda: distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(512).repeat().batch(16)))

    def step_fn(it):
        xb, yb = next(it)
        loss = ((model(xb) - yb) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return strategy.cluster_resolver.task_id

    def full_mse() -> float:
        with torch.no_grad():
            return ((model(x) - y) ** 2).mean().item()

    best = torch.linalg.lstsq(x, y).solution
    optimal = ((x @ best - y) ** 2).mean().item()
    return strategy, coordinator, iterator, step_fn, full_mse, optimal, model


def scenario_worker_killed() -> None:
    strategy, coordinator, iterator, step_fn, full_mse, optimal, model = _setup()
    initial = full_mse()
    for _ in range(20):
        coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()

    def blocking():
        me = strategy.cluster_resolver.task_id
        _marker(f"running.{me}")
        _await_marker("release")
        return me

    held = [coordinator.schedule(blocking) for _ in range(2)]
    later = [coordinator.schedule(step_fn, args=(iterator,)) for _ in range(300)]
    coordinator.join()
    print("RESULT " + json.dumps({
        "held": sorted(int(v.fetch()) for v in held), "later": sorted({int(v.fetch()) for v in later}),
        "lost": {str(k): v for k, v in coordinator.lost_workers.items()},
        "initial": initial, "final": full_mse(), "optimal": optimal}), flush=True)


def scenario_ps_killed() -> None:
    from distrib.coordinator import CancelledError, UnavailableError

    strategy, coordinator, iterator, step_fn, full_mse, optimal, model = _setup()
    for _ in range(10):
        coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()
    _marker("trained")
    _await_marker("ps_killed")
    values, out = [], {"join": None}
    try:
        for _ in range(20):
            values.append(coordinator.schedule(step_fn, args=(iterator,)))
        coordinator.join()
    except UnavailableError as exc:
        out["join"] = str(exc)
        out["task"] = exc.task
    errors = set()
    for v in values:
        try:
            v.fetch()
        except (UnavailableError, CancelledError) as exc:
            errors.add(type(exc).__name__)
    out["fetch_errors"] = sorted(errors)
    try:
        strategy.read_variable(model.weight)
    except UnavailableError as exc:
        out["read"] = str(exc)
    print("RESULT " + json.dumps(out), flush=True)


def scenario_chief_killed() -> None:
    _setup()
    _marker("up")
    _await_marker("never")


# ------------------------------------------------------------------- tests
@pytest.mark.timeout(400)
def test_functions_of_a_killed_worker_run_on_another_and_training_completes(start_cluster):
    c = start_cluster("worker_killed", workers=2, ps=1)
    c.wait_for_marker("running.0")
    c.wait_for_marker("running.1")
    c.kill("worker 1")                    # mid-function: its blocking function must move to worker 0
    (c.tmp / "release").write_text("1")
    assert c.wait("chief") == 0, c.dump()
    r = c.result()
    assert r["held"] == [0, 0]            # worker 1's function ran again, on worker 0
    assert r["later"] == [0]
    assert list(r["lost"]) == ["1"] and f"worker 1 ({c.address('worker', 1)})" in r["lost"]["1"]
    assert r["initial"] > 20 * r["optimal"] and r["final"] < 2 * r["optimal"], r
    assert "re-scheduled on the remaining workers" in c.output("chief")
    assert c.wait("worker 0") == 0 and c.wait("ps 0") == 0, c.dump()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_hung_worker_is_replaced_within_the_timeout(start_cluster):
    # The timeout also bounds start-up, so it must leave room for slow starts on a busy machine.
    c = start_cluster("worker_killed", workers=2, ps=1, timeout_seconds=15)
    c.wait_for_marker("running.0")
    c.wait_for_marker("running.1")
    os.killpg(c.procs["worker 1"].pid, signal.SIGSTOP)   # alive but silent: only the ping timeout can tell
    (c.tmp / "release").write_text("1")
    assert c.wait("chief") == 0, c.dump()
    r = c.result()
    assert r["held"] == [0, 0] and r["later"] == [0]
    assert f"worker 1 ({c.address('worker', 1)}) is unavailable: no answer in time" in r["lost"]["1"], r
    assert r["final"] < 2 * r["optimal"], r


@pytest.mark.timeout(400)
def test_a_killed_ps_is_an_error_naming_it(start_cluster):
    c = start_cluster("ps_killed", workers=2, ps=1)
    c.wait_for_marker("trained")
    c.kill("ps 0")
    (c.tmp / "ps_killed").write_text("1")
    assert c.wait("chief") == 0, c.dump()
    r = c.result()
    named = f"ps 0 ({c.address('ps', 0)}) is unavailable"
    assert r["join"] and named in r["join"], r
    assert r["task"] == "ps 0"
    assert r["fetch_errors"] and set(r["fetch_errors"]) <= {"UnavailableError", "CancelledError"}
    assert named in r["read"]
    assert c.wait("worker 0") == 0 and c.wait("worker 1") == 0, c.dump()


@pytest.mark.timeout(400)
def test_workers_and_ps_exit_when_the_chief_is_killed(start_cluster):
    c = start_cluster("chief_killed", workers=1, ps=1, timeout_seconds=20)
    c.wait_for_marker("up")
    c.kill("chief")
    for name in ("worker 0", "ps 0"):
        assert c.wait(name) == 1, c.dump()
        assert f"the chief ({c.address('chief')}) is unavailable" in c.output(name), c.dump()


@pytest.mark.timeout(200)
def test_a_ps_that_never_starts_is_named_at_start_up(start_cluster):
    c = start_cluster("chief_killed", workers=1, ps=1, skip=("ps 0",), timeout_seconds=4)
    assert c.wait("chief") != 0
    out = c.output("chief")
    assert f"waiting for ps 0 ({c.address('ps', 0)}) to join" in out, c.dump()


if __name__ == "__main__":
    {"worker_killed": scenario_worker_killed, "ps_killed": scenario_ps_killed,
     "chief_killed": scenario_chief_killed}[sys.argv[1]]()
