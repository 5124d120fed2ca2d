"""Under ParameterServerStrategy the chief's model is the variables, before and after training.

* Values the program writes into a `distrib.Model`'s parameters inside the
  scope, after wrapping and before the first step, are what training starts
  from (they reach the ps tasks when the first function is scheduled).
* After `fit` / `evaluate`, the chief's ``model.module`` parameters hold the
  trained values and ``model.optimizer.iterations`` counts the steps.

Each case runs a program on an in-process cluster (chief here, worker and ps
processes), with 1 and with 2 workers.
"""
import json
import os
import textwrap

import pytest

from distrib.testing import run_python

pytestmark = pytest.mark.timeout(300)

PROGRAM = textwrap.dedent("""
    import json, sys
    import numpy as np
    import torch
    import distrib

    workers = int(sys.argv[1])
    strategy = distrib.experimental.ParameterServerStrategy(distrib.testing.create_in_process_cluster(workers, 1))
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.25).astype(np.float32)

    def dataset_fn(ctx):   # every batch is the same 8 rows, on every worker
        return distrib.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()

    data = distrib.data.experimental.DatasetCreator(dataset_fn)
    with strategy.scope():
        net = torch.nn.Linear(4, 1)
        model = distrib.Model(net)
        with torch.no_grad():                         # after wrapping: the program's own first values
            net.weight.copy_(torch.tensor([[0.5, 0.5, 0.5, 0.5]]))
        net.bias.data.fill_(-1.0)
        model.compile(optimizer=distrib.optimizers.SGD(0.1), loss="mse")

    first_loss = model.evaluate(data, steps=2, verbose=0)
    model.fit(data, epochs=1, steps_per_epoch=3, verbose=0)
    chief = [net.weight.detach().clone(), net.bias.detach().clone()]   # read plainly, no forward
    on_ps = [strategy.read_variable(net.weight), strategy.read_variable(net.bias)]
    print("RESULT " + json.dumps({"first_loss": float(first_loss), "iterations": int(model.optimizer.iterations),
                                  "chief": torch.cat([t.flatten() for t in chief]).tolist(),
                                  "ps": torch.cat([t.flatten() for t in on_ps]).tolist()}), flush=True)
""")


def _expected():
    """The loss at the written values, and the weights after 3 SGD steps on the one batch (one worker)."""
    import numpy as np
    import torch

    x = torch.from_numpy(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.25
    w = torch.full((1, 4), 0.5, requires_grad=True)
    b = torch.full((1,), -1.0, requires_grad=True)
    first = float(((x @ w.T + b - y) ** 2).mean().detach())
    for _ in range(3):
        loss = ((x @ w.T + b - y) ** 2).mean()
        gw, gb = torch.autograd.grad(loss, [w, b])
        with torch.no_grad():
            w -= 0.1 * gw
            b -= 0.1 * gb
    return first, w.detach().flatten().tolist() + b.detach().flatten().tolist()


@pytest.mark.parametrize("workers", [1, 2])
def test_written_values_start_training_and_the_chief_reads_the_trained_ones(tmp_path, workers):
    script = tmp_path / "ps_chief_values.py"
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "DISTRIB_LOCAL_DEVICES")}
    env["OMP_NUM_THREADS"] = "1"
    # run_python: a fork of the test process's preloaded server where that is exact, else a new process
    proc = run_python([script, str(workers)], timeout=280, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    first, trained = _expected()
    assert result["first_loss"] == pytest.approx(first, rel=1e-5)     # evaluated at the written values
    assert result["iterations"] == 3
    assert result["chief"] == pytest.approx(result["ps"], rel=1e-6)
    if workers == 1:  # one worker: the 3 steps run in order, from the written values
        assert result["chief"] == pytest.approx(trained, rel=1e-4)
    else:  # asynchronous steps: trained, no longer the written values
        assert result["chief"] != pytest.approx([0.5] * 4 + [-1.0], rel=1e-3)
