"""A kill at every step of a short run ends with the uninterrupted run's weights (issue 40).

Three real workers under ``distrib launch --elastic``; one task (a worker, or
the chief) is SIGKILLed at every step of the run, each step once: the first
process at step 0, its replacement at step 1, the next one at step 2, and so
on, at the step's beginning on even steps and at its end on odd ones. With a
snapshot every 3 steps (a custom loop saves every 2), the kills fall at every
place relative to the snapshots. Each replacement catches up from a
survivor's snapshot and log, and every worker's final weights must equal, bit
for bit, those of a run that was never interrupted -- under `Model.fit` with
`BackupAndRestore` and under a custom loop with `CheckpointManager`.
"""
import json
import os

import pytest

from distrib.checkpoint.files.format import load_state
from distrib.launch import launch
from distrib.launch.result import LaunchTimeoutError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

WORKERS = 3
STEPS = 8
ENV = {"DISTRIB_ELASTIC_SNAPSHOT_EVERY": "3"}

COMMON = '''
import json, os, signal, sys
import numpy as np
import torch
import distrib
from distrib.checkpoint import save_state

out_dir, victim = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1)
strategy = distrib.MultiWorkerMirroredStrategy()
task = strategy.cluster_resolver.task_id


def maybe_die(step, where):
    """Kill this task at step k, the k-th kill of the run: at the step's beginning for even k, else its end."""
    if task != victim:
        return
    k = len([name for name in os.listdir(out_dir) if name.startswith("killed-")])
    if step != k or where != ("begin" if k % 2 == 0 else "end"):
        return
    try:
        os.close(os.open(os.path.join(out_dir, f"killed-{k}"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


def finish(module, extra):
    save_state(module.state_dict(), os.path.join(out_dir, f"final-{task}.safetensors"))
    with open(os.path.join(out_dir, f"extra-{task}.json"), "w") as f:
        json.dump(extra, f)
'''

FIT_SCRIPT = COMMON + '''
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback

with strategy.scope():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.2), torch.nn.ReLU(),
                                              torch.nn.Linear(16, 1)))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])


class Kill(Callback):
    def on_train_batch_begin(self, batch, logs=None):
        maybe_die(model.train_loop_state.global_step, "begin")

    def on_train_batch_end(self, batch, logs=None):
        maybe_die(model.train_loop_state.global_step - 1, "end")


rs = np.random.RandomState(0)
x = rs.randn(24 * 4, 6).astype("float32")
y = (x @ rs.randn(6, 1)).astype("float32")
history = model.fit(x, y, batch_size=24, epochs=2, shuffle=True, verbose=0, validation_data=(x[:48], y[:48]),
                    callbacks=[BackupAndRestore(os.path.join(out_dir, "backup"), save_freq=5), Kill()])
finish(model.module, history.history)
'''

CTL_SCRIPT = COMMON + '''
from distrib.checkpoint.rng import RNGState

STEPS, GB = 8, 24
rs = np.random.RandomState(0)
x = rs.randn(GB * STEPS, 6).astype("float32")
y = (x @ rs.randn(6, 1)).astype("float32")
with strategy.scope():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.2), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    iterator = iter(strategy.experimental_distribute_dataset(
        distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(GB * STEPS, seed=1).batch(GB).repeat()))
    mean_loss = distrib.metrics.Mean()
step = distrib.train.Variable(0, dtype=torch.int64)
checkpoint = distrib.train.Checkpoint(model=model, optimizer=optimizer, step=step, iterator=iterator,
                                      rng=RNGState(strategy))
manager = distrib.train.CheckpointManager(checkpoint, os.path.join(out_dir, "ckpt"), max_to_keep=1)
manager.restore_or_initialize()


def step_fn(inputs):
    xb, yb = inputs
    per_example = ((model(xb) - yb) ** 2).mean(dim=1)
    mean_loss.update_state(per_example.detach())
    loss = distrib.nn.compute_average_loss(per_example)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


losses = {}
while int(step) < STEPS:
    k = int(step)
    maybe_die(k, "begin")
    losses[k] = float(strategy.reduce(distrib.ReduceOp.SUM, strategy.run(step_fn, args=(next(iterator),)), axis=None))
    step.assign_add(1)
    if int(step) % 2 == 0:
        manager.save()
    maybe_die(k, "end")
manager.save()
finish(model, {"mean": float(mean_loss.result())})
'''


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    root = tmp_path_factory.mktemp("every_step")
    paths = {}
    for name, text in (("fit", FIT_SCRIPT), ("ctl", CTL_SCRIPT)):
        paths[name] = root / f"every_step_{name}.py"
        paths[name].write_text(text.lstrip("\n"), encoding="utf-8")
    return paths


def _run(script, out, victim, kills):
    out.mkdir()
    try:
        result = launch(str(script), [str(out), victim], workers=WORKERS, elastic=True, max_restarts=kills,
                        output="capture", timeout=900, grace_seconds=5, env=ENV)
    except LaunchTimeoutError as exc:
        pytest.fail(f"the job did not end in time:\n{(exc.result.output or '')[-8000:]}")
    assert result.returncode == 0, result.output[-6000:]
    assert (result.replacements, result.restarts) == (kills, 0), result.output[-4000:]
    finals = [load_state(str(out / f"final-{t}.safetensors")) for t in range(WORKERS)]
    extras = [json.loads((out / f"extra-{t}.json").read_text()) for t in range(WORKERS)]
    return result, finals, extras


def _equal(a, b):
    return a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


@pytest.fixture(scope="module")
def reference(scripts, tmp_path_factory):
    refs = {}
    for name in ("fit", "ctl"):
        _, finals, extras = _run(scripts[name], tmp_path_factory.mktemp(f"reference-{name}") / "out", -1, 0)
        assert all(_equal(finals[0], f) for f in finals[1:])
        refs[name] = (finals[0], extras[0])
    return refs


@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "chief"])
@pytest.mark.parametrize("name", ["fit", "ctl"])
def test_a_kill_at_every_step_ends_with_the_uninterrupted_weights(scripts, reference, tmp_path, name, victim):
    out = tmp_path / "out"
    result, finals, extras = _run(scripts[name], out, victim, STEPS)
    assert len([n for n in os.listdir(out) if n.startswith("killed-")]) == STEPS
    assert result.output.count(f"worker {victim} was killed by SIGKILL; starting a replacement") == STEPS
    for task, weights in enumerate(finals):
        assert _equal(weights, reference[name][0]), f"worker {task}'s weights differ from the uninterrupted run"
    if name == "ctl":  # a metric over every example: each counted once, however often its replica was lost
        assert extras[0]["mean"] == reference[name][1]["mean"]
    else:  # the epochs a replacement chief ended are logged as the uninterrupted run logged them
        for key, values in reference[name][1].items():
            assert extras[0][key] and extras[0][key] == values[-len(extras[0][key]):], key
