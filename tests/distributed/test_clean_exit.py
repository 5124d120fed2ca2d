"""A program that trains under a parameter server, then on 2 local replicas, exits cleanly.

Before, its end printed ``RuntimeError: cannot schedule new futures after
shutdown`` tracebacks (the chief's gRPC server refusing the ps tasks' calls
once the interpreter had begun to exit) although the exit status was 0.
"""
import os
import textwrap

import pytest

from distrib.testing import run_python

pytestmark = pytest.mark.timeout(300)

PROGRAM = textwrap.dedent("""
    import numpy as np
    import torch
    import distrib

    ps = distrib.experimental.ParameterServerStrategy(distrib.testing.create_in_process_cluster(1, 1))
    with ps.scope():
        model = distrib.Model(torch.nn.Linear(4, 1))
        model.compile(optimizer=distrib.optimizers.SGD(0.1), loss="mse")

    def dataset_fn(ctx):
        x, y = np.ones((32, 4), np.float32), np.ones((32, 1), np.float32)
        return distrib.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)

    model.fit(distrib.data.experimental.DatasetCreator(dataset_fn), epochs=1, steps_per_epoch=3, verbose=0)

    mirrored = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    with mirrored.scope():
        local = distrib.Model(torch.nn.Linear(4, 1))
        local.compile(optimizer=distrib.optimizers.SGD(0.1), loss="mse")
    local.fit(np.ones((16, 4), np.float32), np.ones((16, 1), np.float32), batch_size=8, epochs=1, verbose=0)
    print("trained both", flush=True)
""")


def test_parameter_server_then_mirrored_in_one_program_exits_without_a_traceback(tmp_path):
    script = tmp_path / "ps_then_mirrored.py"
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "DISTRIB_LOCAL_DEVICES")}
    env["OMP_NUM_THREADS"] = "1"
    # run_python: a fork of the test process's preloaded server where that is exact (its interpreter
    # exits as a new one's does: tests/distributed/test_forked_tasks.py), else a new process.
    proc = run_python([script], timeout=280, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trained both" in proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
