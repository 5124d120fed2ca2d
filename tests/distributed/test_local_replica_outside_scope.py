"""Code outside every scope in a local-replica program behaves as in TF's one process.

With ``MirroredStrategy(["cpu:0", "cpu:1"])`` the program runs in two
replica processes. A model created outside the scope, loaded with
``load_model`` outside a scope, or loaded under a later `OneDeviceStrategy`
trains (on the default / one-device strategy) identically in both
processes — the same weights as one process running the same script with a
single device — while its files are written once, by replica 0. Under
``MultiWorkerMirroredStrategy`` the same training stays refused (each task
is a real worker): see ``test_model_fit_multi_worker.py``.
"""
from __future__ import annotations

import json
import os
import sys
import textwrap

import numpy as np
import pytest

from distrib.testing import run_python, run_script

pytestmark = pytest.mark.timeout(300)

SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np, torch, distrib

    out = sys.argv[1]
    devices = sys.argv[2].split(",")
    strategy = distrib.MirroredStrategy(devices)
    torch.manual_seed(0)
    x = np.random.default_rng(1).normal(size=(40, 3)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5]], dtype="float32")).astype("float32")

    model = distrib.Model(torch.nn.Linear(3, 1))                  # outside any scope
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=8, epochs=2, verbose=0,
              callbacks=[distrib.callbacks.CSVLogger(os.path.join(out, "log.csv"))])
    model.save(os.path.join(out, "m.keras"))
    restored = distrib.models.load_model(os.path.join(out, "m.keras"))  # outside any scope
    restored.fit(x, y, batch_size=8, epochs=1, verbose=0)
    with distrib.OneDeviceStrategy("/cpu:0").scope():
        one = distrib.models.load_model(os.path.join(out, "m.keras"))
        one.fit(x, y, batch_size=8, epochs=1, verbose=0)
    print("trained on replica", strategy.replica_id)
    weights = {name: [p.detach().ravel().tolist() for p in m.module.parameters()]
               for name, m in (("model", model), ("restored", restored), ("one", one))}
    # plain Python file writes are user code: they run in every replica process
    with open(os.path.join(out, f"weights-{strategy.replica_id}-of-{strategy.num_replicas_in_sync}.json"), "w") as f:
        json.dump(weights, f)
""")


def _run_plain(tmp_path, devices):
    script = tmp_path / "outside.py"
    script.write_text(SCRIPT)
    out = tmp_path / devices.replace(",", "_").replace(":", "")
    out.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    env.pop("TF_CONFIG", None)
    env.pop("DISTRIB_LOCAL_DEVICES", None)
    proc = run_python([str(script), str(out), devices], env=env, cwd=str(tmp_path), timeout=240)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return out, proc.stdout


def _weights(out, replica, count):
    return json.loads((out / f"weights-{replica}-of-{count}.json").read_text())


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for name in a:
        for pa, pb in zip(a[name], b[name]):
            np.testing.assert_allclose(pa, pb, rtol=0, atol=1e-6, err_msg=name)


def test_outside_scope_trains_identically_in_each_local_replica(tmp_path):
    single, _ = _run_plain(tmp_path, "cpu:0")
    two, stdout = _run_plain(tmp_path, "cpu:0,cpu:1")
    assert stdout.count("trained on replica") == 1                     # replica 0 prints, once
    reference = _weights(single, 0, 1)
    _assert_same(_weights(two, 0, 2), reference)
    _assert_same(_weights(two, 1, 2), reference)
    assert reference["model"] != reference["restored"]                 # the restored models did train
    # files written through distrib: once, by replica 0, complete, no worker temporaries left
    rows = (two / "log.csv").read_text().splitlines()
    assert rows == (single / "log.csv").read_text().splitlines() and len(rows) == 3
    assert (two / "m.keras" / "COMPLETE").exists()
    assert not [p for p in tmp_path.rglob("*") if "workertemp" in p.name]


@pytest.mark.slow
def test_outside_scope_under_launch_adopted_mirrored(tmp_path):
    single, _ = _run_plain(tmp_path, "cpu:0")
    script = tmp_path / "outside_launch.py"
    script.write_text(SCRIPT)
    out = tmp_path / "launch"
    out.mkdir()
    result = run_script(str(script), num_workers=2, args=[str(out), "cpu:0,cpu:1"], cwd=str(tmp_path),
                        timeout=240, env={"OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.output[-3000:]
    reference = _weights(single, 0, 1)
    _assert_same(_weights(out, 0, 2), reference)
    _assert_same(_weights(out, 1, 2), reference)
    assert (out / "log.csv").read_text().splitlines() == (single / "log.csv").read_text().splitlines()


@pytest.mark.slow
def test_differently_seeded_processes_stop_with_one_line(tmp_path):
    script = tmp_path / "seeded.py"
    script.write_text(SCRIPT.replace("torch.manual_seed(0)", "torch.manual_seed(strategy.replica_id)"))
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "DISTRIB_LOCAL_DEVICES")}
    proc = run_python([str(script), str(tmp_path), "cpu:0,cpu:1"], cwd=str(tmp_path),
                      env=dict(env, OMP_NUM_THREADS="1"), timeout=240)
    assert proc.returncode != 0
    assert "DivergedReplicasError: model.fit(): the model (created outside any strategy scope) has different " \
           "weights in local replica processes 0 and 1" in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "log.csv").exists()                        # stopped before training
