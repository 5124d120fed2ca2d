"""Elastic recovery with 3 real workers under ``distrib launch --elastic``.

A worker is SIGKILLed at a step chosen by a seeded RNG (printed in the test
id); the launcher starts only that worker again, the survivors keep their
state, and every worker's final weights must equal, bit for bit, those of an
uninterrupted run -- under `Model.fit` with `BackupAndRestore` and under a
custom loop with `CheckpointManager`. The failure-of-the-failure-path cases:
a second worker dying while the first recovery forms and the replacement dying
while it catches up -- each ends recovered with the same weights, never in a hang.
The chief is replaced like any worker (the launcher hosts the job's store).
"""
import json
import random

import pytest

from distrib.checkpoint.files.format import load_state
from distrib.launch import launch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

WORKERS = 3
FIT_STEPS = 24  # 3 epochs of 8 steps

COMMON = '''
import json, os, signal, sys
import numpy as np
import torch
import distrib
from distrib.checkpoint import save_state

out_dir, mode, fault_rank, fault_step = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
strategy = distrib.MultiWorkerMirroredStrategy()
rank = strategy.replica_id
replacement = os.environ.get("DISTRIB_ELASTIC_JOIN") == "1"
first_attempt = os.environ.get("DISTRIB_RESTART_COUNT", "0") == "0"
armed = first_attempt and not replacement and rank == fault_rank
if replacement:
    torch.rand(5 + rank)  # a replacement's generators start elsewhere: the snapshot must set them


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def marker(name):  # True the first time only (across processes)
    path = os.path.join(out_dir, name)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False


if mode == "two" and rank == (fault_rank + 1) % 3 and not replacement:
    import distrib.comm.elastic.collective as elastic_collective
    forming = elastic_collective.form_generation

    def dying_form_generation(*args, **kwargs):
        die()  # a second worker dies while the first recovery forms
    elastic_collective.form_generation = dying_form_generation


def finish(model_module, extra=None):
    save_state(model_module.state_dict(), os.path.join(out_dir, f"final-{rank}.safetensors"))
    if extra is not None:
        with open(os.path.join(out_dir, f"extra-{rank}.json"), "w") as f:
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


class Fault(Callback):
    def on_train_batch_begin(self, batch, logs=None):
        step = model.train_loop_state.global_step
        if armed and mode in ("begin", "two", "replacement") and step == fault_step:
            die()
        if replacement and mode == "replacement" and step == fault_step and marker("replacement-died"):
            die()  # the first replacement dies while it catches up

    def on_train_batch_end(self, batch, logs=None):
        if armed and mode == "end" and model.train_loop_state.global_step == fault_step:
            die()


rs = np.random.RandomState(0)
x = rs.randn(3 * 8 * 8, 6).astype("float32")
y = (x @ rs.randn(6, 1)).astype("float32")
history = model.fit(x, y, batch_size=24, epochs=3, shuffle=True, verbose=0, validation_data=(x[:48], y[:48]),
                    callbacks=[BackupAndRestore(os.path.join(out_dir, "backup"), save_freq=5), Fault()])
finish(model.module, history.history)
'''

CTL_SCRIPT = COMMON + '''
from distrib.checkpoint.rng import RNGState

EPOCHS, STEPS, GB = 3, 6, 24
rs = np.random.RandomState(0)
x = rs.randn(GB * STEPS, 6).astype("float32")
y = (x @ rs.randn(6, 1)).astype("float32")
with strategy.scope():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.2), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    dataset = strategy.experimental_distribute_dataset(
        distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(GB * STEPS, seed=1).batch(GB).repeat())
    iterator = iter(dataset)
epoch = distrib.train.Variable(0, dtype=torch.int64, name="epoch")
checkpoint = distrib.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch, iterator=iterator,
                                      rng=RNGState(strategy))
manager = distrib.train.CheckpointManager(checkpoint, os.path.join(out_dir, "ckpt"), max_to_keep=1)
restored = manager.restore_or_initialize()


def step_fn(inputs):
    xb, yb = inputs
    loss = distrib.nn.compute_average_loss(((model(xb) - yb) ** 2).mean(dim=1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


losses = []
step = int(epoch.numpy()) * STEPS
while int(epoch.numpy()) < EPOCHS:
    for _ in range(STEPS):
        if armed and step == fault_step:
            die()
        loss = strategy.reduce(distrib.ReduceOp.SUM, strategy.run(step_fn, args=(next(iterator),)), axis=None)
        losses.append(float(loss))
        step += 1
    epoch.assign_add(1)
    manager.save()
finish(model, {"restored": restored})
'''


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    root = tmp_path_factory.mktemp("elastic")
    paths = {}
    for name, text in (("fit", FIT_SCRIPT), ("ctl", CTL_SCRIPT)):
        paths[name] = root / f"elastic_{name}.py"
        paths[name].write_text(text.lstrip("\n"), encoding="utf-8")
    return paths


def _run(script, out, mode="none", rank=-1, step=-1, elastic=True, max_restarts=2):
    out.mkdir()
    result = launch(str(script), [str(out), mode, rank, step], workers=WORKERS, elastic=elastic,
                    max_restarts=max_restarts, output="capture", timeout=400, grace_seconds=5)
    assert result.returncode == 0, result.output[-6000:]
    finals = [load_state(str(out / f"final-{r}.safetensors")) for r in range(WORKERS)]
    return result, finals


def _equal(a, b):
    return a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


@pytest.fixture(scope="module")
def reference(scripts, tmp_path_factory):
    """Uninterrupted runs, elastic off: what every faulty run must reproduce."""
    refs = {}
    for name in ("fit", "ctl"):
        out = tmp_path_factory.mktemp(f"reference-{name}") / "out"
        result, finals = _run(scripts[name], out, elastic=False, max_restarts=0)
        assert all(_equal(finals[0], f) for f in finals[1:])
        refs[name] = (finals[0], json.loads((out / "extra-0.json").read_text()))
    return refs


def _cases(kind, total, count):
    cases = []
    for seed in range(count):
        rng = random.Random(f"{kind}-{seed}")
        rank, step = rng.randint(1, WORKERS - 1), rng.randint(0, total - 1)
        where = rng.choice(["begin", "end"]) if kind == "fit" else "begin"
        cases.append(pytest.param(rank, step, where, id=f"seed{seed}-worker{rank}-step{step}-{where}"))
    return cases


@pytest.mark.parametrize("rank,step,where", _cases("fit", FIT_STEPS, 3))
def test_fit_survivors_keep_state_and_replacement_catches_up(scripts, reference, tmp_path, rank, step, where):
    result, finals = _run(scripts["fit"], tmp_path / "out", where, rank, step)
    assert (result.replacements, result.restarts) == (1, 0), result.output[-4000:]
    assert "starting a replacement for it alone" in result.output
    for r, weights in enumerate(finals):
        assert _equal(weights, reference["fit"][0]), f"worker {r}'s weights differ from the uninterrupted run"
    history = json.loads((tmp_path / "out" / "extra-0.json").read_text())
    assert history == reference["fit"][1], "the logged history differs from the uninterrupted run"


@pytest.mark.parametrize("rank,step,where", _cases("ctl", 18, 2))
def test_custom_loop_survivors_keep_state_and_replacement_catches_up(scripts, reference, tmp_path, rank, step, where):
    result, finals = _run(scripts["ctl"], tmp_path / "out", where, rank, step)
    assert (result.replacements, result.restarts) == (1, 0), result.output[-4000:]
    replacement = json.loads((tmp_path / "out" / f"extra-{rank}.json").read_text())
    assert replacement["restored"] == "<in-memory snapshot of a surviving worker>"  # not read from storage
    for r, weights in enumerate(finals):
        assert _equal(weights, reference["ctl"][0]), f"worker {r}'s weights differ from the uninterrupted run"


def test_a_second_worker_dying_while_recovery_forms_is_replaced_too(scripts, reference, tmp_path):
    result, finals = _run(scripts["fit"], tmp_path / "out", "two", 1, 9)
    assert (result.replacements, result.restarts) == (2, 0), result.output[-4000:]
    assert all(_equal(w, reference["fit"][0]) for w in finals)


def test_a_replacement_dying_while_it_catches_up_is_replaced_again(scripts, reference, tmp_path):
    result, finals = _run(scripts["fit"], tmp_path / "out", "replacement", 2, 13)
    assert (result.replacements, result.restarts) == (2, 0), result.output[-4000:]
    assert (tmp_path / "out" / "replacement-died").exists()
    assert all(_equal(w, reference["fit"][0]) for w in finals)


@pytest.mark.parametrize("name,where,step", [("fit", "end", 12), ("ctl", "begin", 8)])
def test_the_chief_is_replaced_like_any_worker_and_the_result_is_kept(scripts, reference, tmp_path, name, where, step):
    """The launcher hosts the job's store, so the chief's loss leaves it: the survivors wait there, the
    launcher starts worker 0 again alone, and it catches up from another survivor's snapshot."""
    result, finals = _run(scripts[name], tmp_path / "out", where, 0, step)
    assert (result.replacements, result.restarts) == (1, 0), result.output[-4000:]
    assert "worker 0 was killed by SIGKILL; starting a replacement for it alone" in result.output
    assert "generation 1 formed" in result.output, result.output[-4000:]
    for r, weights in enumerate(finals):
        assert _equal(weights, reference[name][0]), f"worker {r}'s weights differ from the uninterrupted run"
    if name == "fit":  # the epochs the chief's replacement ended are logged as the uninterrupted run logged them
        history = json.loads((tmp_path / "out" / "extra-0.json").read_text())
        for key, values in reference["fit"][1].items():
            assert history[key] and history[key] == values[-len(history[key]):], key
