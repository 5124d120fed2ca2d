"""Local replicas are processes: what a save returns, and why a departed replica left.

* ``CheckpointManager(Checkpoint(...), tempfile.mkdtemp())``: each replica
  process makes its own directory; ``save()`` (and ``Checkpoint.save``)
  returns, on every replica, the path the chief wrote, and every replica
  restores it.
* A replica that fails leaves its own error line in the error its sibling
  raises ("replica 1 (cpu:1) is gone (its last error line: ...)").
"""
import json
import os
import textwrap

import pytest

from distrib.testing import run_python

pytestmark = pytest.mark.timeout(300)

SAVE = textwrap.dedent("""
    import json, sys, tempfile
    import torch, distrib

    strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    with strategy.scope():
        net = torch.nn.Linear(2, 1)
    step = distrib.train.Variable(5, name="step")
    checkpoint = distrib.train.Checkpoint(model=net, step=step)
    own = tempfile.mkdtemp()                                  # a different directory in each process
    manager = distrib.train.CheckpointManager(checkpoint, own, max_to_keep=2)
    saved = manager.save()
    direct = checkpoint.save(tempfile.mkdtemp() + "/direct")
    step.assign(0)
    checkpoint.restore(saved)
    restored = int(step.numpy())
    with open(f"{sys.argv[1]}/out.{strategy.replica_id}.json", "w") as f:
        json.dump({"own": own, "saved": saved, "direct": direct, "restored": restored}, f)
""")

GONE = textwrap.dedent("""
    import torch, distrib

    strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    if strategy.replica_id == 1:
        raise ValueError("replica one's own reason")
    strategy.reduce("SUM", strategy.run(lambda: torch.tensor(1.0)), axis=None)
""")


def _run(tmp_path, program):
    script = tmp_path / "program.py"
    script.write_text(program)
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "DISTRIB_LOCAL_DEVICES")}
    env["OMP_NUM_THREADS"] = "1"
    return run_python([str(script), str(tmp_path)], timeout=280, cwd=str(tmp_path), env=env)


def test_every_replica_gets_the_path_the_chief_wrote_and_restores_it(tmp_path):
    proc = _run(tmp_path, SAVE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    chief, other = (json.loads((tmp_path / f"out.{i}.json").read_text()) for i in (0, 1))
    assert chief["own"] != other["own"]                       # the per-process value differs...
    assert other["saved"] == chief["saved"] and chief["saved"].startswith(chief["own"])   # ...the answer not
    assert other["direct"] == chief["direct"]
    assert chief["restored"] == other["restored"] == 5


def test_a_departed_replicas_own_error_line_is_in_its_siblings_error(tmp_path):
    proc = _run(tmp_path, GONE)
    assert proc.returncode != 0
    lost = [line for line in proc.stderr.splitlines() if "is gone" in line]
    assert lost and "its last error line:" in lost[0] and "replica one's own reason" in lost[0], proc.stderr[-3000:]
