"""`Model.fit`/`evaluate` under ParameterServerStrategy: real chief, worker and ps processes.

Scenarios run this file as a script on every task (``TF_CONFIG`` as the
launcher writes it, ports picked at run time); the chief prints one
``RESULT {json}`` line. Moments are agreed through marker files, as in
test_parameter_server_faults.py.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from distrib.testing import run_python
from ps_task_harness import await_marker as _await_marker
from ps_task_harness import cluster_starter
from ps_task_harness import marker as _marker

HERE = os.path.abspath(__file__)
WAIT = 180.0


@pytest.fixture
def start_cluster(tmp_path):
    """``start_cluster(scenario, workers=2, ps=2, run="a")`` (see ps_task_harness)."""
    with cluster_starter(tmp_path, HERE, wait=WAIT) as start:
        def start_run(scenario: str, workers: int = 2, ps: int = 2, run: str = "a"):
            return start(scenario, workers=workers, ps=ps, run=run, env={"PS_TEST_RUN": run})
        yield start_run


# --------------------------------------------------------------- scenarios
def _setup(resolver=None, timeout: float = 30.0):
    """A learnable regression (y = x·w + 0.1, 4 features) with a lazy first layer; returns what scenarios need."""
    import torch

    import distrib

    options = distrib.CommunicationOptions(timeout_seconds=timeout)
    strategy = distrib.experimental.ParameterServerStrategy(resolver, communication_options=options)
    torch.manual_seed(0)
    x = torch.randn(512, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1

    def dataset_fn(ctx):
        ds = distrib.data.Dataset.from_tensor_slices((x, y))
        return ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).shuffle(256).batch(16).repeat()

    with strategy.scope():
        model = distrib.Model(torch.nn.Sequential(torch.nn.LazyLinear(8), torch.nn.Linear(8, 1)))
        model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.02, momentum=0.5), loss="mse",
                      metrics=["mae", "r2_score"] + _torchmetrics_mae())

    def full_mse() -> float:
        with torch.no_grad():
            return ((model(x) - y) ** 2).mean().item()
    return strategy, model, dataset_fn, full_mse


def _torchmetrics_mae() -> list:
    try:
        import torchmetrics
    except ImportError:  # optional (the test extra)
        return []
    return [torchmetrics.MeanAbsoluteError()]


def scenario_fit_in_process() -> None:
    import torch

    import distrib
    from distrib.process.fork_client import ForkedProcess

    resolver = distrib.testing.create_in_process_cluster(num_workers=2, num_ps=2)
    strategy, model, dataset_fn, full_mse = _setup(resolver)
    model.steps_per_execution = 3
    history = model.fit(distrib.data.experimental.DatasetCreator(dataset_fn), epochs=4, steps_per_epoch=12,
                        validation_data=dataset_fn, validation_steps=2, validation_freq=2, verbose=0)
    evaluated = model.evaluate(dataset_fn, steps=4, return_dict=True, verbose=0)
    executor = type(distrib.training.trainer.executor_for(model)).__name__     # the one loop's scheduled steps
    placement = sorted({d for p in model.module.parameters() for d in strategy.variable_placement(p)})
    updates = [strategy.ps_inventory(i)["updates"] for i in range(2)]
    no_steps = None
    try:
        model.fit(dataset_fn, epochs=1, verbose=0)
    except ValueError as exc:
        no_steps = str(exc)
    with strategy.scope():     # buffers: BatchNorm statistics come back from the workers to the chief
        bn_model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8)))
        bn_model.compile(optimizer="sgd", loss="mse")
    bn_model.fit(lambda ctx: dataset_fn(ctx).map(lambda x, y: (x, y.expand(-1, 8))), epochs=1, steps_per_epoch=6,
                 verbose=0)
    norm = bn_model.module[1]
    buffers = {"mean": norm.running_mean.abs().sum().item(), "var": (norm.running_var - 1).abs().sum().item(),
               "tracked": int(norm.num_batches_tracked)}
    with strategy.scope():     # a custom loop must build a lazy module itself before scheduling
        lazy = torch.nn.LazyLinear(2)
    lazy_error = None
    try:
        distrib.coordinator.ClusterCoordinator(strategy).schedule(lambda: lazy(torch.ones(1, 3)))
    except ValueError as exc:
        lazy_error = str(exc)
    children = {name: proc.pid for name, proc in resolver.in_process_cluster.procs.items()
                if proc.poll() is None}
    forked = sorted(name for name, proc in resolver.in_process_cluster.procs.items()
                    if isinstance(proc, ForkedProcess))
    print("RESULT " + json.dumps({"loss": history.history["loss"], "mae": history.history["mae"],
                                  "r2": history.history["r2_score"],
                                  "tm_mae": history.history.get("mean_absolute_error"),
                                  "val_loss": history.history.get("val_loss"),
                                  "epochs": history.epoch, "children": children, "forked": forked, "buffers": buffers,
                                  "executor": executor,
                                  "lazy_error": lazy_error, "eval": evaluated, "final": full_mse(),
                                  "placement": placement, "updates": updates, "no_steps": no_steps}), flush=True)


def scenario_fit_worker_killed() -> None:
    import distrib

    strategy, model, dataset_fn, full_mse = _setup()
    coordinator = distrib.coordinator.ClusterCoordinator(strategy)

    def blocking():
        me = strategy.cluster_resolver.task_id
        _marker(f"running.{me}")
        _await_marker("release")
        return me

    held = []

    class HoldBothWorkers(distrib.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 1:   # fit's closures of this epoch queue behind these two
                held.extend(coordinator.schedule(blocking) for _ in range(2))

    initial = full_mse()
    history = model.fit(dataset_fn, epochs=3, steps_per_epoch=20, callbacks=[HoldBothWorkers()], verbose=0)
    print("RESULT " + json.dumps({"loss": history.history["loss"], "epochs": history.epoch,
                                  "held": sorted(int(v.fetch()) for v in held),
                                  "lost": {str(k): v for k, v in coordinator.lost_workers.items()},
                                  "initial": initial, "final": full_mse()}), flush=True)


def _momentum(model) -> list:
    """The momentum buffers as the chief's optimizer reports them (read from the ps tasks)."""
    state = model.torch_optimizer.state_dict()["state"]
    return [state[i]["momentum"].tolist() for i in sorted(state)]


def scenario_fit_backup() -> None:
    import distrib

    strategy, model, dataset_fn, full_mse = _setup(timeout=15.0)
    run = os.environ["PS_TEST_RUN"]
    seen = {}

    class Watch(distrib.callbacks.Callback):
        def on_train_begin(self, logs=None):   # after BackupAndRestore's: what the ps tasks hold now
            seen["begin"] = [strategy.read_variable(p).tolist() for p in model.module.parameters()]
            seen["slots"] = _momentum(model)
            seen["initial_mse"] = full_mse()

        def on_epoch_end(self, epoch, logs=None):
            if run == "a" and epoch == 2:     # the backup of epoch 2 is written: die here
                state = [strategy.read_variable(p).tolist() for p in model.module.parameters()]
                Path(os.environ["PS_TEST_DIR"], "saved.json").write_text(json.dumps([state, _momentum(model)]))
                _marker("saved")
                _await_marker("never")

    backup = distrib.callbacks.BackupAndRestore(os.path.join(os.environ["PS_TEST_DIR"], "backup"))
    history = model.fit(dataset_fn, epochs=6, steps_per_epoch=10, callbacks=[backup, Watch()], verbose=0)
    print("RESULT " + json.dumps({"epochs": history.epoch, "loss": history.history["loss"],
                                  "restored_from": backup.restored_from, "begin": seen["begin"],
                                  "slots": seen["slots"],
                                  "initial_mse": seen["initial_mse"], "final": full_mse()}), flush=True)


# ------------------------------------------------------------------- tests
@pytest.mark.timeout(300)
def test_fit_and_evaluate_on_an_in_process_cluster(tmp_path):
    """Chief (this scenario's process) + 2 workers + 2 ps as its child processes; a lazy first layer."""
    proc = run_python([HERE, "fit_in_process"], timeout=240, runtime=("PS_TEST_DIR",),
                      env={**os.environ, "OMP_NUM_THREADS": "1", "PS_TEST_DIR": str(tmp_path)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    r = json.loads([line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][-1][7:])
    assert r["epochs"] == [0, 1, 2, 3] and r["executor"] == "ScheduledExecutor"
    assert r["loss"][-1] < r["loss"][0] / 20, r["loss"]             # learns: y is linear in x
    assert r["mae"][-1] < r["mae"][0], r["mae"]
    assert r["r2"][0] < r["r2"][-1] and r["r2"][-1] > 0.9, r["r2"]   # R2Score builds its state on the workers
    if importlib.util.find_spec("torchmetrics") is not None:  # torchmetrics' MAE, merged on the chief too
        assert r["tm_mae"] == pytest.approx(r["mae"], rel=1e-5), (r["tm_mae"], r["mae"])
    assert len(r["val_loss"]) == 2 and r["val_loss"][-1] < r["loss"][0] / 20, r   # validated after epochs 2 and 4
    assert r["eval"]["loss"] < r["loss"][0] / 20 and set(r["eval"]) >= {"loss", "mae", "r2_score"}, r["eval"]
    assert r["final"] < r["loss"][0] / 20
    b = r["buffers"]
    assert b["mean"] > 0 and b["var"] > 0 and 1 <= b["tracked"] <= 6, b
    assert r["placement"] == ["/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"]
    assert min(r["updates"]) >= 4 * 12, r["updates"]                 # every step applied on both ps tasks
    assert "needs steps_per_epoch=N" in r["no_steps"], r["no_steps"]
    assert r["lazy_error"].startswith("ParameterServerStrategy: LazyLinear.weight is not initialized"), r
    assert sorted(r["children"]) == ["ps 0", "ps 1", "worker 0", "worker 1"]
    assert r["forked"] == sorted(r["children"])     # forks of one preloaded server: torch imported once
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in r["children"].values()):     # they end with the chief's program
        assert time.monotonic() < deadline, r["children"]
        time.sleep(0.05)  # poll: nothing notifies us of a grandchild's exit


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_fit_goes_on_when_a_worker_is_killed(start_cluster):
    c = start_cluster("fit_worker_killed")
    c.wait_for_marker("running.0")
    c.wait_for_marker("running.1")
    c.kill("worker 1")                      # mid-fit, mid-function: its function moves to worker 0
    (c.tmp / "release").write_text("1")
    assert c.wait("chief") == 0, c.dump()
    r = c.result()
    assert r["epochs"] == [0, 1, 2]
    assert r["held"] == [0, 0]
    assert list(r["lost"]) == ["1"], r
    assert r["final"] < r["initial"] / 20 and r["loss"][-1] < r["loss"][0] / 5, r
    assert "re-scheduled on the remaining workers" in c.output("chief")


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_a_restarted_chief_resumes_from_backup_and_restore(start_cluster):
    first = start_cluster("fit_backup", run="a")
    first.wait_for_marker("saved")
    first.kill("chief")
    for name in ("worker 0", "worker 1", "ps 0", "ps 1"):
        assert first.wait(name) == 1, first.dump()         # they notice the chief is gone
    second = start_cluster("fit_backup", run="b")
    assert second.wait("chief") == 0, second.dump()
    r = second.result()
    saved, saved_slots = json.loads((first.tmp / "saved.json").read_text())
    assert r["restored_from"] and r["epochs"] == [3, 4, 5], r      # the epoch count continues
    assert len(r["begin"]) == len(saved)
    for got, want in zip(r["begin"], saved):                       # the ps tasks hold the backup's values
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6)
    assert len(r["slots"]) == len(saved_slots) == 4                 # optimizer slots restored too
    for got, want in zip(r["slots"], saved_slots):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6)
        assert np.abs(np.asarray(want)).sum() > 0
    assert r["initial_mse"] < 1.0 and r["final"] < 1.0, r           # a fresh model would start near 15


if __name__ == "__main__":
    {"fit_in_process": scenario_fit_in_process, "fit_worker_killed": scenario_fit_worker_killed,
     "fit_backup": scenario_fit_backup}[sys.argv[1]]()
