"""ParameterServerStrategy + ClusterCoordinator on real processes (chief, workers, ps on 127.0.0.1).

Each test launches this file as every task of a cluster (``distrib.testing.run_script``
with ``chief=True`` and ``ps=N``); ``python test_parameter_server.py SCENARIO``
runs one scenario. Workers and ps tasks serve inside the strategy's
constructor; the chief runs the scenario and prints one ``RESULT {json}`` line.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from distrib.comm.secret import new_secret
from distrib.testing import ClusterRunError, run_script

HERE = os.path.abspath(__file__)
EXAMPLE = os.path.join(os.path.dirname(HERE), "..", "..", "examples", "ps_ctl.py")


# ----------------------------------------------------------------- harness
def run_ps_cluster(target: str, args=(), *, workers: int = 2, ps: int = 1, timeout: float = 240,
                   env=None):
    """Launch ``target`` as chief + workers + ps; return the launch result (must succeed)."""
    try:
        result = run_script(target, workers, args=list(args), chief=True, ps=ps, timeout=timeout,
                            env={"OMP_NUM_THREADS": "1", "DISTRIB_JOB_SECRET": new_secret(), **(env or {})})
    except ClusterRunError as exc:
        pytest.fail(f"cluster timed out:\n{exc.result.output[-6000:]}")
    assert result.returncode == 0, result.output[-6000:]
    return result


def chief_result(result) -> dict:
    lines = [line for line in result.outputs["chief"].splitlines() if line.startswith("RESULT ")]
    assert lines, result.output[-6000:]
    return json.loads(lines[-1][len("RESULT "):])


def report(**values) -> None:
    print("RESULT " + json.dumps(values), flush=True)


# --------------------------------------------------------------- scenarios
def scenario_linreg() -> None:
    """Asynchronous linear regression with 2 workers and 2 ps tasks."""
    import torch

    import distrib
    from distrib.coordinator import ClusterCoordinator
    from distrib.strategies.parameter_server import ParameterServerStrategy

    strategy = ParameterServerStrategy()
    torch.manual_seed(0)
    x = torch.randn(1024, 4)
    y = x @ torch.tensor([[1.5], [-2.0], [0.5], [3.0]]) + 0.7 + 0.1 * torch.randn(1024, 1)
    design = torch.cat([x, torch.ones(1024, 1)], 1)
    best = torch.linalg.lstsq(design, y).solution
    optimal_mse = ((design @ best - y) ** 2).mean().item()

    with strategy.scope():
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    initial = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        initial_mse = ((model(x) - y) ** 2).mean().item()
    coordinator = ClusterCoordinator(strategy)

    def dataset_fn():
        return distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(1024).repeat().batch(32)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    def step_fn(it):
        xb, yb = next(it)
        loss = ((model(xb) - yb) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return strategy.cluster_resolver.task_id, loss.detach()

    values = [coordinator.schedule(step_fn, args=(iterator,)) for _ in range(300)]
    coordinator.join()
    done_after_join = all(v.done() for v in values)
    workers = sorted({int(v.fetch()[0]) for v in values})
    cached_unchanged = all(torch.equal(p.detach(), q) for p, q in zip(model.parameters(), initial))
    on_ps = [strategy.read_variable(p) for p in model.parameters()]
    with torch.no_grad():
        final_mse = ((model(x) - y) ** 2).mean().item()   # forward refreshes the chief's copy
    report(optimal_mse=optimal_mse, initial_mse=initial_mse, final_mse=final_mse,
           done_after_join=done_after_join, done=coordinator.done(), workers=workers,
           cached_unchanged=cached_unchanged,
           refreshed=all(torch.equal(p.detach(), v) for p, v in zip(model.parameters(), on_ps)),
           placement=[strategy.variable_placement(p) for p in model.parameters()],
           updates=[strategy.ps_inventory(i)["updates"] for i in (0, 1)],
           shards=[sorted(map(str, strategy.ps_inventory(i)["shards"])) for i in (0, 1)])


def scenario_exact() -> None:
    """One worker, two ps, a partitioned variable: the result equals training in one process."""
    import torch

    from distrib.coordinator import ClusterCoordinator
    from distrib.strategies.parameter_server import ParameterServerStrategy
    from distrib.strategies.parameter_server.partitioners import FixedShardsPartitioner

    strategy = ParameterServerStrategy(variable_partitioner=FixedShardsPartitioner(2))

    def build():
        torch.manual_seed(3)
        net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
        return net, torch.optim.Adam(net.parameters(), lr=0.05)

    with strategy.scope():
        model, optimizer = build()
    reference, ref_opt = build()
    coordinator = ClusterCoordinator(strategy)
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 3, generator=gen), torch.randn(8, 2, generator=gen)) for _ in range(12)]

    def step_fn(xb, yb):
        loss = ((model(xb) - yb) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    initial_state = {k: v.clone() for k, v in reference.state_dict().items()}
    losses = []
    for i, b in enumerate(batches):
        if i == 6:   # a learning-rate change on the chief reaches the ps with the next function
            optimizer.param_groups[0]["lr"] = 0.01
        losses.append(coordinator.schedule(step_fn, args=b).get())   # one at a time: no staleness
    ref_losses = []
    for i, (xb, yb) in enumerate(batches):
        if i == 6:
            ref_opt.param_groups[0]["lr"] = 0.01
        loss = ((reference(xb) - yb) ** 2).mean()
        ref_opt.zero_grad()
        loss.backward()
        ref_opt.step()
        ref_losses.append(loss.item())
    diffs = [(strategy.read_variable(p) - q.detach()).abs().max().item()
             for p, q in zip(model.parameters(), reference.parameters())]
    state_diff = max((v - reference.state_dict()[k]).abs().max().item() for k, v in model.state_dict().items())
    model.load_state_dict(initial_state)          # restoring on the chief writes through to the ps tasks
    restored_diff = max((strategy.read_variable(p) - initial_state[k]).abs().max().item()
                        for k, p in model.named_parameters())
    report(max_weight_diff=max(diffs), losses=[float(v) for v in losses], ref_losses=ref_losses,
           state_diff=state_diff, restored_diff=restored_diff,
           placement=[strategy.variable_placement(p) for p in model.parameters()])


def scenario_semantics() -> None:
    """schedule / join / done / fetch / errors / PerWorkerValues / metrics, 2 workers, 1 ps."""
    import numpy as np
    import torch

    import distrib
    from distrib.coordinator import CancelledError, ClusterCoordinator, PerWorkerValues, RemoteValue
    from distrib.strategies.parameter_server import ParameterServerStrategy

    strategy = ParameterServerStrategy()
    with strategy.scope():
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        seen = distrib.metrics.Mean()
    coordinator = ClusterCoordinator(strategy)
    out = {"same_coordinator": ClusterCoordinator(strategy) is coordinator,
           "replicas": strategy.num_replicas_in_sync}

    def add(a, b):
        seen.update_state(torch.tensor([1.0, 3.0]))
        return strategy.run(lambda u, v: u + v, args=(a, b))

    values = [coordinator.schedule(add, args=(torch.tensor(float(i)), torch.tensor(1.0))) for i in range(20)]
    out["is_remote_value"] = all(isinstance(v, RemoteValue) for v in values)
    coordinator.join()
    out["all_done"] = coordinator.done() and all(v.done() for v in values)
    fetched = [v.fetch() for v in values]
    out["fetch_numpy"] = all(isinstance(f, np.ndarray) for f in fetched)
    out["get_tensor"] = all(isinstance(v.get(), torch.Tensor) for v in values)
    out["sums"] = [float(f) for f in fetched]
    out["metric"] = [seen.result().item(), seen.count.item()]
    out["fetch_structure"] = coordinator.fetch({"a": values[0], "b": [values[1], 7]})["b"][1]

    per_worker = PerWorkerValues([100, 200])

    def which(value):
        return strategy.cluster_resolver.task_id, value, strategy.input_context().input_pipeline_id

    pairs = [coordinator.fetch(coordinator.schedule(which, args=(per_worker,))) for _ in range(6)]
    out["per_worker_ok"] = all(v == 100 * (t + 1) and p == t for t, v, p in pairs)
    out["remote_value_arg"] = float(coordinator.schedule(add, args=(values[3], torch.tensor(10.0))).fetch())

    def boom():
        raise ValueError("boom from a worker")

    failing = coordinator.schedule(boom)
    queued = []
    out["join_raised"] = None
    try:   # the error surfaces in a later schedule() or in join(), whichever comes first
        for _ in range(50):
            queued.append(coordinator.schedule(add, args=(torch.tensor(0.0), torch.tensor(0.0))))
        coordinator.join()
    except ValueError as exc:
        out["join_raised"] = str(exc)
        out["join_note"] = " ".join(getattr(exc, "__notes__", []))
    out["queued"] = len(queued)
    try:
        failing.fetch()
    except ValueError as exc:
        out["fetch_raised"] = str(exc)
    cancelled_or_ran = 0
    for v in queued:
        try:
            v.fetch()
        except CancelledError:
            pass
        cancelled_or_ran += 1   # any other error propagates
    out["cancelled_or_ran"] = cancelled_or_ran
    out["after_error"] = float(coordinator.schedule(add, args=(torch.tensor(2.0), torch.tensor(3.0))).fetch())
    try:
        optimizer.step()
        out["chief_step"] = None
    except RuntimeError as exc:
        out["chief_step"] = str(exc)
    report(**out)


# ------------------------------------------------------------------- tests
@pytest.mark.timeout(300)
def test_linear_regression_trains_asynchronously_with_variables_on_ps():
    r = chief_result(run_ps_cluster(HERE, ["linreg"], workers=2, ps=2))
    assert r["initial_mse"] > 20 * r["optimal_mse"]
    assert r["final_mse"] < 2 * r["optimal_mse"], r
    assert r["done_after_join"] and r["done"]
    assert r["workers"] == [0, 1]          # both workers ran steps
    # Round-robin placement; the ps tasks applied every step; the chief's tensors were a cache.
    assert r["placement"] == [["/job:ps/replica:0/task:0/device:CPU:0"], ["/job:ps/replica:0/task:1/device:CPU:0"]]
    assert r["shards"] == [["(0, 0)"], ["(1, 0)"]]
    assert r["updates"] == [300, 300]
    assert r["cached_unchanged"] and r["refreshed"]


@pytest.mark.timeout(300)
def test_one_worker_with_partitioned_variables_matches_one_process():
    r = chief_result(run_ps_cluster(HERE, ["exact"], workers=1, ps=2))
    assert r["max_weight_diff"] < 1e-5, r
    assert r["state_diff"] < 1e-5          # the chief's state_dict reads the trained values
    assert r["restored_diff"] == 0.0       # load_state_dict on the chief reached the ps tasks
    assert r["losses"] == pytest.approx(r["ref_losses"], rel=1e-5, abs=1e-6)
    # FixedShardsPartitioner(2): every variable with >= 2 rows has one shard on each ps.
    assert r["placement"][0] == ["/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"]
    assert all(len(p) == 2 for p in r["placement"])


@pytest.mark.timeout(300)
def test_schedule_join_fetch_errors_and_per_worker_values():
    r = chief_result(run_ps_cluster(HERE, ["semantics"], workers=2, ps=1))
    assert r["same_coordinator"] and r["replicas"] == 1
    assert r["is_remote_value"] and r["all_done"] and r["fetch_numpy"] and r["get_tensor"]
    assert r["sums"] == [float(i + 1) for i in range(20)]
    assert r["metric"] == [2.0, 40.0]      # 20 functions x 2 values, mean 2: metric deltas reached the chief
    assert r["fetch_structure"] == 7
    assert r["per_worker_ok"]
    assert r["remote_value_arg"] == 14.0
    assert r["join_raised"] == "boom from a worker"
    assert "worker" in r["join_note"] and "127.0.0.1:" in r["join_note"]
    assert r["fetch_raised"] == "boom from a worker"
    assert r["cancelled_or_ran"] == r["queued"]
    assert r["after_error"] == 5.0
    assert r["chief_step"] and "coordinator.schedule" in r["chief_step"]


@pytest.mark.timeout(300)
def test_guide_example_ps_ctl_trains(monkeypatch):
    import distrib

    if not hasattr(distrib.experimental, "partitioners"):
        pytest.skip("distrib.experimental.partitioners is not exposed yet")
    result = run_ps_cluster(EXAMPLE, workers=2, ps=2, env={"PS_CTL_EPOCHS": "4"})
    out = result.outputs["chief"]
    assert "('/job:ps/replica:0/task:0/device:CPU:0', '/job:ps/replica:0/task:1/device:CPU:0')" in out
    accuracies = [float(line.rsplit(" ", 1)[1].rstrip(".")) for line in out.splitlines()
                  if line.startswith("Finished epoch")]
    assert len(accuracies) == 4 and accuracies[-1] >= 0.9, out
    final = float(out.split("Final loss is ")[1].split()[0])
    assert final < 0.3, out


@pytest.mark.timeout(120)
def test_cluster_without_ps_is_a_clear_error():
    from distrib.cluster import ClusterConfigError, ClusterSpec, SimpleClusterResolver
    from distrib.strategies.parameter_server import ParameterServerStrategy

    resolver = SimpleClusterResolver(ClusterSpec({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}),
                                     task_type="chief", task_id=0)
    with pytest.raises(ClusterConfigError, match="needs at least one 'ps' task"):
        ParameterServerStrategy(resolver)
    resolver = SimpleClusterResolver(ClusterSpec({"worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}),
                                     task_type="ps", task_id=0)
    with pytest.raises(ClusterConfigError, match="needs at least one 'chief' task"):
        ParameterServerStrategy(resolver)
    result = run_script(HERE, 2, args=["linreg"], chief=True, timeout=100, env={"OMP_NUM_THREADS": "1"})
    assert result.returncode != 0
    assert "ClusterConfigError: ParameterServerStrategy needs at least one 'ps' task" in result.output


if __name__ == "__main__":
    {"linreg": scenario_linreg, "exact": scenario_exact, "semantics": scenario_semantics}[sys.argv[1]]()
