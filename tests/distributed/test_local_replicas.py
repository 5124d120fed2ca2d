"""Several replicas per task: MirroredStrategy from a plain script, and W workers x D devices."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from distrib.testing import run_cluster, run_python, start_python

STEPS = 12
PER_REPLICA = 3

COMMON = textwrap.dedent("""
    import torch

    def data(num_replicas, steps={steps}, per_replica={per_replica}):
        g = torch.Generator().manual_seed(7)
        return (torch.randn(steps, per_replica * num_replicas, 5, generator=g),
                torch.randn(steps, per_replica * num_replicas, 1, generator=g))

    def build():
        return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def train(strategy, distrib):
        torch.manual_seed(100 + strategy.replica_id)     # replicas disagree until synced
        with strategy.scope():
            model = build()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
        initial = [p.detach().clone() for p in model.parameters()]
        n, r = strategy.num_replicas_in_sync, strategy.replica_id
        xs, ys = data(n)
        mine = slice(r * {per_replica}, (r + 1) * {per_replica})
        for step in range({steps}):
            def step_fn(x, y):
                loss = distrib.nn.compute_average_loss(((model(x) - y) ** 2).sum(1))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            strategy.run(step_fn, (xs[step, mine], ys[step, mine]))
        return initial, [p.detach() for p in model.parameters()]
""").format(steps=STEPS, per_replica=PER_REPLICA)

MIRRORED_SCRIPT = textwrap.dedent("""
    import json, sys, torch, distrib
    from common import train
    print("script started")
    strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    initial, final = train(strategy, distrib)
    if strategy.is_chief:
        json.dump({"replicas": strategy.num_replicas_in_sync,
                   "initial": [t.tolist() for t in initial], "final": [t.tolist() for t in final]},
                  open(sys.argv[1], "w"))
    print("done on replica", strategy.replica_id)
""")


def _reference(initial, num_replicas):
    ns = {}
    exec(COMMON, ns)
    model = ns["build"]()
    with torch.no_grad():
        for p, v in zip(model.parameters(), initial):
            p.copy_(torch.tensor(v))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    xs, ys = ns["data"](num_replicas)
    for step in range(STEPS):
        ((model(xs[step]) - ys[step]) ** 2).sum(1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach() for p in model.parameters()]


def test_mirrored_strategy_from_a_plain_script(tmp_path):
    (tmp_path / "common.py").write_text(COMMON)
    script = tmp_path / "train.py"
    script.write_text(MIRRORED_SCRIPT)
    out_file = tmp_path / "out.json"
    # OMP_NUM_THREADS as the harness's clusters have it: replica 1 is then a fork where replica 0 is one
    proc = run_python([script, out_file], cwd=tmp_path, timeout=280,
                      env={**{k: v for k, v in os.environ.items() if k != "TF_CONFIG"}, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("script started") == 1, proc.stdout  # children's output is not shown
    assert proc.stdout.count("done on replica") == 1 and "done on replica 0" in proc.stdout
    result = json.loads(out_file.read_text())
    assert result["replicas"] == 2
    for got, want in zip(result["final"], _reference(result["initial"], 2)):
        torch.testing.assert_close(torch.tensor(got), want, rtol=1e-5, atol=1e-6)


def two_devices_per_worker(common_dir):
    sys.path.insert(0, common_dir)
    import distrib
    from common import train

    strategy = distrib.MultiWorkerMirroredStrategy()
    initial, final = train(strategy, distrib)
    return {"replicas": strategy.num_replicas_in_sync, "replica_id": strategy.replica_id,
            "chief": strategy.is_chief, "initial": initial, "final": final}


def test_two_workers_with_two_local_devices_are_four_replicas(tmp_path):
    (tmp_path / "common.py").write_text(COMMON)
    results = run_cluster(two_devices_per_worker, num_workers=2, args=(str(tmp_path),), timeout=180,
                          env={"DISTRIB_LOCAL_DEVICES": "cpu:0,cpu:1", "OMP_NUM_THREADS": "1"})
    assert [r["replicas"] for r in results] == [4, 4]
    assert [r["replica_id"] for r in results] == [0, 2]
    assert [r["chief"] for r in results] == [True, False]
    assert results[0]["final"] == results[1]["final"]
    for got, want in zip(results[0]["final"], _reference(results[0]["initial"], 4)):
        torch.testing.assert_close(torch.tensor(got), want, rtol=1e-5, atol=1e-6)


CHDIR_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import distrib
    os.chdir("elsewhere")                      # before the strategy re-launches this script
    strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    ids = strategy.experimental_local_results(strategy.replica_id)
    if strategy.is_chief:
        json.dump({"replicas": strategy.num_replicas_in_sync, "ids": list(ids), "cwd": os.getcwd()},
                  open("out.json", "w"))
""")


@pytest.mark.slow
def test_mirrored_replicas_survive_a_chdir_before_the_strategy(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "train.py").write_text(CHDIR_SCRIPT)
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, text=True, capture_output=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if k != "TF_CONFIG"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "elsewhere" / "out.json").read_text())
    assert result == {"replicas": 2, "ids": [0, 1], "cwd": str(tmp_path / "elsewhere")}


SECOND_STRATEGY_SCRIPT = textwrap.dedent("""
    import json, os, torch, distrib
    with open("starts.txt", "a") as f:
        f.write(f"{os.getpid()}\\n")
    first = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    second = distrib.MirroredStrategy(["cpu:0", "cpu:1"])   # as TF allows: same replicas, no re-launch
    total = second.reduce("SUM", second.run(lambda: torch.tensor(1.0 + second.replica_id)), axis=None)
    one = distrib.OneDeviceStrategy("cpu")                 # a one-device scope after Mirrored
    with one.scope():
        layer = torch.nn.Linear(2, 1)
    one.run(lambda: layer(torch.ones(3, 2)).sum()).backward()
    result = {"ids": [first.replica_id, second.replica_id], "total": total.item(),
              "one": [one.num_replicas_in_sync, layer.weight.grad.tolist()]}
    with open(f"out.{first.replica_id}.json", "w") as f:
        json.dump(result, f)
""")


@pytest.mark.slow
def test_a_second_strategy_reuses_the_replicas_and_one_device_scope_stays_local(tmp_path):
    (tmp_path / "train.py").write_text(SECOND_STRATEGY_SCRIPT)
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, text=True, capture_output=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if k != "TF_CONFIG"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len((tmp_path / "starts.txt").read_text().split()) == 2   # launched once, not twice
    for replica in range(2):
        result = json.loads((tmp_path / f"out.{replica}.json").read_text())
        assert result["ids"] == [replica, replica]
        assert result["total"] == 3.0
        assert result["one"] == [1, [[3.0, 3.0]]]   # the gradient of one replica, not summed


ORPHAN_SCRIPT = textwrap.dedent("""
    import os, sys, threading, distrib
    strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    path = os.path.join(sys.argv[1], "pid%d" % strategy.replica_id)
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    threading.Event().wait()  # every replica blocks until killed
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next(line for line in f if line.startswith("State:"))
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        return False
    return "zombie" not in state


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_local_replicas_die_with_replica_0_even_on_sigkill(tmp_path):
    import signal
    import time

    script = tmp_path / "hang.py"
    script.write_text(ORPHAN_SCRIPT)
    # Replica 0 is a fork of the test process's preloaded server where that is exact (a new process
    # otherwise); replica 1 is the one it starts, as any script's: a new process here, since replica 0
    # gives it an OMP_NUM_THREADS the server's environment lacks (forked replicas: test_local_replica_forks.py).
    with open(tmp_path / "replica-0.log", "wb") as log:
        proc = start_python([script, tmp_path], output=log, cwd=tmp_path,
                            env={k: v for k, v in os.environ.items() if k != "TF_CONFIG"})
    child_pid = None
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "pid1").exists():
            assert proc.poll() is None, (tmp_path / "replica-0.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the replicas never started"
            time.sleep(0.05)  # poll
        child_pid = int((tmp_path / "pid1").read_text())
        assert child_pid != proc.pid and _alive(child_pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.05)  # poll
        assert not _alive(child_pid), "local replica 1 outlived replica 0"
    finally:
        proc.kill()
        proc.wait()
        if child_pid is not None and _alive(child_pid):
            os.kill(child_pid, signal.SIGKILL)
