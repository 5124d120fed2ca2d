"""`distrib launch` across namespace hosts: real machines' network stacks on one box.

Each host is a network namespace with its own address on a private bridge
(`distrib.testing.netns`); one `distrib launch --hosts ... --node-rank I`
runs in each, exactly as a user runs it over SSH. Checked: equivalence with
one process, exact resume after a worker or a whole host is killed, and a
partition that ends the survivors with an error naming the lost task.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import List

import numpy as np
import pytest

from distrib.checkpoint.files.format import load_state
from distrib.testing import run_python
from distrib.testing.netns import NamespaceHosts, namespaces_available

pytestmark = pytest.mark.timeout(300)

_REASON = namespaces_available()
needs_netns = pytest.mark.skipif(_REASON is not None, reason=f"namespace hosts: {_REASON}")

TRAIN_SCRIPT = '''
import os, signal, sys, time
import numpy as np
import torch
import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback
from distrib.checkpoint import save_state

out_dir, backup_dir, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
fault_rank, fault_step, mode = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
torch.set_num_threads(1)
options = distrib.CommunicationOptions(timeout_seconds=timeout) if timeout else None
strategy = distrib.MultiWorkerMirroredStrategy(communication_options=options)
rank = strategy.replica_id
marker = os.path.join(out_dir, "fault-reached")
armed = rank == fault_rank and not os.path.exists(marker)
with strategy.scope():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(),
                                              torch.nn.Linear(16, 1)))
    model.compile(optimizer="adam", loss="mse")


class Fault(Callback):
    def on_train_batch_end(self, batch, logs=None):
        if not armed or model.train_loop_state.global_step != fault_step:
            return
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        if mode == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        release = os.path.join(out_dir, "release")
        deadline = time.monotonic() + 120
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)  # poll: the test creates the file once it has acted


rs = np.random.RandomState(0)
x = rs.randn(128, 6).astype("float32")
y = (x @ rs.randn(6, 1)).astype("float32")
model.fit(x, y, batch_size=16, epochs=2, shuffle=True, verbose=0,
          callbacks=[BackupAndRestore(backup_dir, save_freq=4), Fault()])
save_state(model.module.state_dict(), os.path.join(out_dir, f"final-{rank}.safetensors"))
print("finished as replica", rank, "of", strategy.num_replicas_in_sync)
'''

# Every test gets fresh namespaces, whose network stacks hold nothing else: a fixed port is free.
MASTER_PORT = 29400


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TRAIN_SCRIPT)
    return str(path)


def start_node(hosts: NamespaceHosts, i: int, script: str, out: str, *, nproc: int = 1,
               max_restarts: int = 0, timeout: float = 0, fault_rank: int = -1,
               fault_step: int = 0, mode: str = "none", budget: float = 200) -> subprocess.Popen:
    """Run `distrib launch` for node ``i`` inside namespace host ``i``."""
    addresses = ",".join(hosts.address(k) for k in range(hosts.n))
    argv = [sys.executable, "-m", "distrib", "launch", "--hosts", addresses, "--node-rank", str(i),
            "--nproc-per-node", str(nproc), "--master-port", str(MASTER_PORT),
            "--max-restarts", str(max_restarts), "--timeout", str(budget), "--grace-seconds", "2",
            "--output-from", "all",  # every task's report line, not only the chief's (the default)
            script, out, os.path.join(out, "backup"), str(timeout), str(fault_rank),
            str(fault_step), mode]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return hosts.popen(i, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def finish(procs: List[subprocess.Popen], timeout: float = 240) -> List[str]:
    outputs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            out += "\n<<test: launcher killed after its timeout>>"
        outputs.append(out)
    return outputs


def weights(out: str, rank: int):
    return load_state(os.path.join(out, f"final-{rank}.safetensors"))


def assert_same(a, b, exact: bool) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        if exact:
            assert np.array_equal(a[name].numpy(), b[name].numpy()), name
        else:
            np.testing.assert_allclose(a[name].numpy(), b[name].numpy(), rtol=1e-5, atol=1e-6)


def wait_for_file(path: str, procs: List[subprocess.Popen], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        assert all(p.poll() is None for p in procs), "a launcher ended before the fault point"
        time.sleep(0.05)  # poll


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("one"))
    path = os.path.join(out, "train.py")
    with open(path, "w") as f:
        f.write(TRAIN_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    proc = run_python([path, out, os.path.join(out, "backup"), "0", "-1", "0", "none"],
                      env=dict(env, OMP_NUM_THREADS="1"), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return weights(out, 0)


PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 9), timeout=2).close()
    print("open")
except ConnectionRefusedError:
    print("reachable")
except OSError as exc:
    print("unreachable", type(exc).__name__)
"""


@needs_netns
@pytest.mark.parametrize("wire", [False, True], ids=["bridge", "wire"])
def test_namespace_hosts_reach_each_other_cut_restore_and_vanish(wire):
    with NamespaceHosts(2, wire=wire) as hosts:
        names = list(hosts.names)
        probe = [sys.executable, "-c", PROBE, hosts.address(0)]
        assert hosts.run(1, probe).stdout.split()[0] == "reachable"  # nothing listens: refused
        hosts.cut(1)
        assert hosts.run(1, probe).stdout.split()[0] == "unreachable"
        hosts.restore(1)
        deadline = time.monotonic() + 30  # the link needs a moment to carry traffic again
        while hosts.run(1, probe).stdout.split()[0] != "reachable":
            assert time.monotonic() < deadline, "host 1 never reached host 0 after restore"  # poll
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=20).stdout
    assert not any(name in left for name in names), left


@needs_netns
def test_two_hosts_train_like_one_process(script, tmp_path, one_process):
    with NamespaceHosts(2) as hosts:
        outputs = finish([start_node(hosts, i, script, str(tmp_path)) for i in range(2)])
    assert all("finished as replica" in o for o in outputs), "\n".join(
        f"--- node {i}'s output (its end):\n{o[-2500:]}" for i, o in enumerate(outputs))
    assert f"worker 1 ({hosts.address(1)}:{MASTER_PORT + 1})" in outputs[1]
    for rank in range(2):
        assert_same(weights(str(tmp_path), rank), one_process, exact=False)


@needs_netns
@pytest.mark.slow
def test_two_hosts_two_workers_each_train_like_one_process(script, tmp_path, one_process):
    with NamespaceHosts(2) as hosts:  # the global batch of 16 splits over 4 replicas, not 6
        outputs = finish([start_node(hosts, i, script, str(tmp_path), nproc=2) for i in range(2)])
    assert all(o.count("finished as replica") == 2 for o in outputs), outputs
    assert f"worker 3 ({hosts.address(1)}:{MASTER_PORT + 3})" in outputs[1], outputs[1]
    for rank in range(4):
        assert_same(weights(str(tmp_path), rank), one_process, exact=False)


@pytest.fixture(scope="module")
def two_hosts_reference(tmp_path_factory):
    if _REASON is not None:
        pytest.skip(f"namespace hosts: {_REASON}")
    out = str(tmp_path_factory.mktemp("ref"))
    path = os.path.join(out, "train.py")
    with open(path, "w") as f:
        f.write(TRAIN_SCRIPT)
    with NamespaceHosts(2) as hosts:
        outputs = finish([start_node(hosts, i, path, out) for i in range(2)])
    assert all("finished as replica" in o for o in outputs), outputs
    return weights(out, 0)


@needs_netns
@pytest.mark.slow
def test_a_worker_killed_on_one_host_resumes_exactly(script, tmp_path, two_hosts_reference):
    out = str(tmp_path)
    with NamespaceHosts(2) as hosts:
        outputs = finish([start_node(hosts, i, script, out, max_restarts=3, timeout=10,
                                     fault_rank=1, fault_step=6, mode="sigkill")
                          for i in range(2)])
    assert os.path.exists(os.path.join(out, "fault-reached"))
    assert "restarting all tasks" in outputs[1], outputs[1]
    for rank in range(2):
        assert_same(weights(out, rank), two_hosts_reference, exact=True)


@needs_netns
@pytest.mark.slow
def test_a_whole_host_killed_and_restarted_resumes_exactly(script, tmp_path, two_hosts_reference):
    out = str(tmp_path)
    with NamespaceHosts(2) as hosts:
        procs = [start_node(hosts, i, script, out, max_restarts=3, timeout=10, fault_rank=1,
                            fault_step=6, mode="hold") for i in range(2)]
        wait_for_file(os.path.join(out, "fault-reached"), procs)
        assert hosts.kill_host(1), "nothing was running on host 1"
        procs[1].wait(timeout=30)
        procs[1] = start_node(hosts, 1, script, out, max_restarts=3, timeout=10)
        outputs = finish(procs)
    assert "restarting all tasks" in outputs[0], outputs[0]
    for rank in range(2):
        assert_same(weights(out, rank), two_hosts_reference, exact=True)


@needs_netns
@pytest.mark.slow
def test_a_partition_names_the_lost_task_and_resumes_exactly(script, tmp_path, two_hosts_reference):
    out = str(tmp_path)
    with NamespaceHosts(2) as hosts:
        procs = [start_node(hosts, i, script, out, max_restarts=4, timeout=8, fault_rank=1,
                            fault_step=6, mode="hold") for i in range(2)]
        wait_for_file(os.path.join(out, "fault-reached"), procs)
        hosts.cut(1)
        open(os.path.join(out, "release"), "w").close()
        lines: List[str] = []
        for line in procs[0].stdout:  # the chief's launcher reports the failure, then restarts
            lines.append(line)
            if "restarting all tasks" in line:
                break
        hosts.restore(1)
        outputs = finish(procs)
    chief = "".join(lines) + outputs[0]
    assert "restarting all tasks" in chief, chief
    assert f"worker 1 ({hosts.address(1)}:{MASTER_PORT + 1})" in chief.split("restarting")[0], chief
    for rank in range(2):
        assert_same(weights(out, rank), two_hosts_reference, exact=True)


@needs_netns
@pytest.mark.slow
def test_the_slurm_recipe_trains_across_hosts(script, tmp_path, one_process):
    """What `srun python train.py` gives each task, on two namespace hosts: no launcher at all."""
    out = str(tmp_path)
    with NamespaceHosts(2) as hosts:
        nodelist = ",".join(hosts.address(i) for i in range(2))
        procs = []
        for i in range(2):
            env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
            env.update(SLURM_PROCID=str(i), SLURM_NTASKS="2", SLURM_JOB_NODELIST=nodelist,
                       SLURM_TASKS_PER_NODE="1(x2)", MASTER_PORT=str(MASTER_PORT),
                       OMP_NUM_THREADS="1")
            procs.append(hosts.popen(i, [sys.executable, script, out, os.path.join(out, "backup"),
                                         "0", "-1", "0", "none"], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True))
        outputs = finish(procs)
    assert all("finished as replica" in o and "of 2" in o for o in outputs), outputs
    for rank in range(2):
        assert_same(weights(out, rank), one_process, exact=False)


@needs_netns
@pytest.mark.slow
@pytest.mark.parametrize("delay_ms, loss_percent", [(5, 0), (20, 1)])
def test_training_completes_over_a_slow_lossy_link(script, tmp_path, one_process, delay_ms, loss_percent):
    with NamespaceHosts(2, wire=True, delay_ms=delay_ms, loss_percent=loss_percent) as hosts:
        outputs = finish([start_node(hosts, i, script, str(tmp_path)) for i in range(2)])
    assert all("finished as replica" in o for o in outputs), outputs
    for rank in range(2):
        assert_same(weights(str(tmp_path), rank), one_process, exact=False)
