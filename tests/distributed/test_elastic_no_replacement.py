"""Elastic survivors whose lost worker is never replaced end with one line naming it, never a hang (issue 26).

Three tasks started by hand (no launcher that could start a replacement) with
``DISTRIB_ELASTIC=1`` and a 10 s communication timeout; worker 2 SIGKILLs
itself after step 3. Workers 0 and 1 enter recovery, wait the timeout for a
replacement, and exit with `ElasticRecoveryError` naming worker 2, leaving a
checkpoint to resume from (saved at every step).
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from distrib.process.ports import reserve_ports

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TRAIN = textwrap.dedent("""
    import os, signal, sys, torch, distrib
    out = sys.argv[1]
    strategy = distrib.MultiWorkerMirroredStrategy(
        communication_options=distrib.CommunicationOptions(timeout_seconds=10))
    task = strategy.cluster_resolver.task_id
    with strategy.scope():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = distrib.train.Variable(0, dtype=torch.int64)
    manager = distrib.train.CheckpointManager(distrib.train.Checkpoint(model=model, optimizer=optimizer, step=step),
                                              os.path.join(out, "ckpt"), max_to_keep=1)
    manager.restore_or_initialize()

    def step_fn():
        loss = model(torch.ones(2, 4)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    while int(step) < 1000:
        strategy.run(step_fn)
        step.assign_add(1)
        manager.save()
        if task == 2 and int(step) == 3:
            os.kill(os.getpid(), signal.SIGKILL)
""")


def test_survivors_without_a_replacement_name_the_lost_worker_within_the_timeout(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    ports = reserve_ports(3)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(3):
        env = dict(os.environ, OMP_NUM_THREADS="1", DISTRIB_ELASTIC="1", DISTRIB_JOB_SECRET="no-replacement-test",
                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        procs.append(subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=180) for p in procs]
    assert procs[2].returncode == -9
    lost = f"worker 2 (127.0.0.1:{ports[2]})"
    for index in (0, 1):
        err = outs[index][1]
        assert procs[index].returncode not in (0, None), err[-2000:]
        last = err.strip().splitlines()[-1]
        assert "ElasticRecoveryError" in last and lost in last and "neither answered nor was replaced" in last, last
        assert "elastic recovery, generation 1" in err
    assert any(name.startswith("ckpt-") for name in os.listdir(tmp_path / "ckpt")), "nothing to resume from"
