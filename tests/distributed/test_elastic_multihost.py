"""Elastic recovery across namespace hosts: each node's ``distrib launch --elastic`` replaces its own lost task.

Two hosts (`distrib.testing.netns`), one worker each; the worker on host 1 is
SIGKILLed at a step; host 1's launcher starts it again alone, it joins the
chief on host 0 over the network and catches up from the chief's snapshot;
both end with the weights of the same job run without a fault. The failure
path across hosts too: a replacement killed as it starts is replaced again;
the chief killed is replaced on its host (node 0's launcher hosts the job's
store). And a node that comes up late joins the running job (``--nnodes 2:3``).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from distrib.checkpoint.files.format import load_state
from distrib.testing.netns import NamespaceHosts, namespaces_available

_REASON = namespaces_available()
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.skipif(_REASON is not None, reason=f"namespace hosts: {_REASON}")]
MASTER_PORT = 29400  # fresh namespaces: nothing else listens there

SCRIPT = '''
import os, signal, sys
import numpy as np
import torch
import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback
from distrib.checkpoint import save_state

out_dir, fault_step, fault_rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
strategy = distrib.MultiWorkerMirroredStrategy()
rank = strategy.replica_id
armed = (rank == fault_rank and os.environ.get("DISTRIB_ELASTIC_JOIN") != "1"
         and os.environ.get("DISTRIB_RESTART_COUNT") == "0")
with strategy.scope():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.2), torch.nn.ReLU(),
                                              torch.nn.Linear(16, 1)))
    model.compile(optimizer="adam", loss="mse")


once = os.path.join(out_dir, "replacement-killed")
again = (os.environ.get("KILL_THE_REPLACEMENT") == "1" and os.environ.get("DISTRIB_ELASTIC_JOIN") == "1"
         and not os.path.exists(once))


class Fault(Callback):
    def on_train_batch_end(self, batch, logs=None):
        if armed and model.train_loop_state.global_step == fault_step:
            os.kill(os.getpid(), signal.SIGKILL)
        if again:  # the first replacement dies at its first step, as soon as it has caught up
            open(once, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


rs = np.random.RandomState(0)
x = rs.randn(128, 6).astype("float32")
y = (x @ rs.randn(6, 1)).astype("float32")
model.fit(x, y, batch_size=16, epochs=2, shuffle=True, verbose=0,
          callbacks=[BackupAndRestore(os.path.join(out_dir, "backup"), save_freq=4), Fault()])
save_state(model.module.state_dict(), os.path.join(out_dir, f"final-{rank}.safetensors"))
'''


def _outputs_of_successful(procs):
    """Each launcher's output once it ended (killed after 450 s); every launcher must have exited 0."""
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=450)[0])
        except subprocess.TimeoutExpired:
            proc.kill()
            outputs.append(proc.communicate()[0] + "\n<<test: launcher killed after its timeout>>")
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outputs)
    return outputs


def _job(tmp_path, name: str, fault_step: int, fault_rank: int = 1, kill_the_replacement: bool = False):
    out = tmp_path / name
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1", DISTRIB_JOB_SECRET="elastic-multihost-test",
               KILL_THE_REPLACEMENT=str(int(kill_the_replacement)))
    restarts = "2" if kill_the_replacement else "1"
    with NamespaceHosts(2) as hosts:
        addresses = ",".join(hosts.address(k) for k in range(2))
        procs = [hosts.popen(i, [sys.executable, "-m", "distrib", "launch", "--hosts", addresses, "--node-rank",
                                 str(i), "--master-port", str(MASTER_PORT), "--elastic", "--max-restarts", restarts,
                                 "--timeout", "400", "--grace-seconds", "2", str(script), str(out),
                                 str(fault_step), str(fault_rank)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
                 for i in range(2)]
        outputs = _outputs_of_successful(procs)
    return outputs, [load_state(str(out / f"final-{r}.safetensors")) for r in range(2)]


def test_a_worker_killed_on_another_host_is_replaced_there_and_catches_up(tmp_path):
    _, reference = _job(tmp_path, "reference", -1)
    outputs, finals = _job(tmp_path, "faulty", 5)
    assert "worker 1 was killed by SIGKILL; starting a replacement for it alone" in outputs[1], outputs[1][-3000:]
    assert "generation 1 formed" in outputs[0], outputs[0][-3000:]
    for weights in finals:
        assert weights.keys() == reference[0].keys() and all(weights[k].equal(reference[0][k]) for k in weights)


def test_a_replacement_killed_on_its_host_is_replaced_again_and_the_result_is_kept(tmp_path):
    _, reference = _job(tmp_path, "reference", -1)
    outputs, finals = _job(tmp_path, "replacement-killed", 5, kill_the_replacement=True)
    assert (tmp_path / "replacement-killed" / "replacement-killed").exists()
    assert outputs[1].count("worker 1 was killed by SIGKILL; starting a replacement for it alone") == 2, \
        outputs[1][-3000:]
    for weights in finals:
        assert weights.keys() == reference[0].keys() and all(weights[k].equal(reference[0][k]) for k in weights)


def test_the_chief_killed_on_its_host_is_replaced_there_and_the_result_is_kept(tmp_path):
    """Node 0's launcher hosts the job's store, so the chief's loss leaves it up: the worker on host 1
    waits in it, node 0's launcher starts the chief again alone, and it catches up from host 1's
    snapshot over the network."""
    _, reference = _job(tmp_path, "reference", -1)
    outputs, finals = _job(tmp_path, "chief-killed", 5, fault_rank=0)
    assert "worker 0 was killed by SIGKILL; starting a replacement for it alone" in outputs[0], outputs[0][-3000:]
    assert "generation 1 formed" in outputs[1], outputs[1][-3000:]
    assert "restarting" not in (outputs[0] + outputs[1]).lower(), outputs[0][-3000:]
    for weights in finals:
        assert weights.keys() == reference[0].keys() and all(weights[k].equal(reference[0][k]) for k in weights)


GROW_SCRIPT = '''
import os, sys, time
import numpy as np
import torch
import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback
from distrib.checkpoint import save_state

out_dir = sys.argv[1]
torch.set_num_threads(1)
strategy = distrib.MultiWorkerMirroredStrategy()
task = strategy.cluster_resolver.task_id
with strategy.scope():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
    model.compile(optimizer="adam", loss="mse")


class WaitForTheLateNode(Callback):
    def on_train_batch_end(self, batch, logs=None):
        step = model.train_loop_state.global_step
        if task == 0 and step == 2:
            open(os.path.join(out_dir, "training"), "w").close()  # the test starts node 1's launcher now
        if task == 0 and step == 4:
            deadline = time.monotonic() + 200
            # poll: node 1's launcher and its Python start-up take seconds
            while strategy.num_replicas_in_sync < 3 and not strategy.collective.joiners_waiting():
                assert time.monotonic() < deadline, "node 2 never asked to join"
                time.sleep(0.05)  # poll


rs = np.random.RandomState(0)
x = rs.randn(144, 6).astype("float32")
y = (x @ rs.randn(6, 1)).astype("float32")
model.fit(x, y, batch_size=24, epochs=2, shuffle=True, verbose=0,
          callbacks=[BackupAndRestore(os.path.join(out_dir, "backup"), save_freq=4), WaitForTheLateNode()])
save_state(model.module.state_dict(), os.path.join(out_dir, f"final-{task}.safetensors"))
print(f"replicas at the end: {strategy.num_replicas_in_sync}")
'''


def _grow_job(tmp_path, name: str, nnodes: str):
    """Three namespace hosts; with ``nnodes="2:3"`` node 2's launcher starts only once nodes 0 and 1 train."""
    out = tmp_path / name
    out.mkdir()
    script = tmp_path / "grow.py"
    script.write_text(GROW_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1", DISTRIB_JOB_SECRET="elastic-grow-test")
    late = nnodes != "3"
    with NamespaceHosts(3) as hosts:
        addresses = ",".join(hosts.address(k) for k in range(3))

        def start(i):
            return hosts.popen(i, [sys.executable, "-m", "distrib", "launch", "--hosts", addresses, "--nnodes",
                                   nnodes, "--node-rank", str(i), "--master-port", str(MASTER_PORT), "--elastic",
                                   "--max-restarts", "1", "--timeout", "400", "--grace-seconds", "2", str(script),
                                   str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        procs = [start(0), start(1)]
        if late:
            deadline = time.monotonic() + 300
            while not (out / "training").exists():  # poll: nodes 0 and 1 are training (or failed)
                assert procs[0].poll() is None and time.monotonic() < deadline, procs[0].communicate()[0][-3000:]
                time.sleep(0.05)  # poll
        procs.append(start(2))
        outputs = _outputs_of_successful(procs)
    return outputs, [load_state(str(out / f"final-{r}.safetensors")) for r in range(3)]


def test_a_node_that_comes_up_late_joins_the_running_job_without_changing_the_result(tmp_path):
    """``--nnodes 2:3``: nodes 0 and 1 start the job; node 2's launcher starts while they train and joins.

    The global batch stays 24 throughout: split 2 ways (12 rows each), then 3 ways (8 each).
    """
    _, reference = _grow_job(tmp_path, "fixed", "3")
    outputs, finals = _grow_job(tmp_path, "grown", "2:3")
    assert "worker 2 (" in outputs[2] and "asks to join the running job" in outputs[2], outputs[2][-3000:]
    assert "joined; the job goes on with 3 workers (was 2)" in outputs[0], outputs[0][-3000:]
    assert "replicas at the end: 3" in outputs[2]
    for weights in finals:
        assert weights.keys() == reference[0].keys()
        assert all(torch.allclose(weights[k], reference[0][k], rtol=1e-5, atol=1e-6) for k in weights)
