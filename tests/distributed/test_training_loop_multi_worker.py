"""The one step loop across 2 real worker processes: steps_per_execution and validation_split keep
the single-process result, and every worker calls the same hooks with logs at the same steps."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import distrib
from distrib.testing import run_cluster

pytestmark = pytest.mark.timeout(240)

N, GLOBAL_BATCH = 40, 8   # validation_split=0.2: 32 training rows, 4 steps per epoch; 8 validation rows


class HookLog(distrib.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.calls = []

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append(["train", batch, logs is not None])

    def on_test_batch_end(self, batch, logs=None):
        self.calls.append(["test", batch, logs is not None])

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(["epoch", epoch, sorted(logs)])


def fit_and_report(steps_per_execution):
    """Runs in each worker (and, with one replica, in the test process)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 4)).astype(np.float32)
    y = (x @ rng.normal(size=(4, 1))).astype(np.float32)
    strategy = distrib.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = distrib.Model(torch.nn.Linear(4, 1))
        model.compile(optimizer="sgd", loss="mse", steps_per_execution=steps_per_execution)
    model.log_every = 3
    hooks = HookLog()
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, verbose=0, validation_split=0.2, callbacks=[hooks])
    return {"weights": [w.tolist() for w in model.get_weights()], "history": history.history,
            "calls": hooks.calls, "global_step": model.train_loop_state.global_step}


@pytest.fixture(scope="module")
def two_workers():
    return run_cluster(fit_and_report, num_workers=2, args=(3,), timeout=200)


def test_two_workers_with_executions_of_3_take_the_single_process_steps(two_workers):
    reference = fit_and_report(1)
    for result in two_workers:
        assert result["global_step"] == reference["global_step"] == 8
        for got, want in zip(result["weights"], reference["weights"]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert result["history"].keys() == reference["history"].keys() == {"loss", "val_loss"}
        for key in ("loss", "val_loss"):
            np.testing.assert_allclose(result["history"][key], reference["history"][key], rtol=1e-5)


def test_every_worker_calls_the_same_hooks_once_per_execution(two_workers):
    first, second = two_workers
    assert first["calls"] == second["calls"]
    # 4 training steps in executions [0-2] and [3]; logs where an execution reaches step 3, and at the last;
    # validation (1 step) logs about 16 times per pass whatever model.log_every says: at its one step
    epoch = [["train", 2, True], ["train", 3, True], ["test", 0, True]]
    assert first["calls"] == epoch + [["epoch", 0, ["loss", "val_loss"]]] + epoch + [["epoch", 1, ["loss", "val_loss"]]]
