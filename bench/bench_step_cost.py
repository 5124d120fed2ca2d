"""Per-step cost of a tiny model's training step, as ratios to a hand-written PyTorch loop.

No GPU needed: the model is so small (Linear 32->64->10, batch 32, Adam, one
thread) that a step's time is almost all framework overhead — the Python
path, loss and metric bookkeeping, the optimizer step, the input path —
which is exactly what a GPU user pays on the host while the GPU waits.

Every system trains the same model on the same synthetic data for
``--epochs`` epochs of ``--steps`` steps, each in its own process, with a
timestamp after every step (a callback's ``on_train_batch_end`` for the
`fit` systems, the loop itself for the others). A run's figure is its mean
step time after ``--warmup`` steps (periodic work such as logging and epoch
ends included). Systems run interleaved, round after round, and each row
reports the median over rounds of its ratio to the plain loop *of the same
round*:

* ``torch_loop``: the plain loop (``torch.optim.Adam``, ``F.cross_entropy``,
  indexing a shuffled permutation) — the baseline;
* ``distrib_ctl``: the TF custom-loop tutorial's step (``compute_average_loss`` of
  unreduced losses) under ``strategy.run`` over ``experimental_distribute_dataset``
  (default strategy); ``distrib_ctl_same_step``: the plain loop's own step
  under ``strategy.run`` (what the loop machinery alone costs);
* ``distrib_fit``: ``distrib.Model.fit`` on arrays with distrib's Keras-rule
  ``Adam``; ``distrib_fit_torch_adam``: the same with ``torch.optim.Adam``
  (the plain loop's optimizer: framework overhead only);
  ``distrib_fit_acc``: with ``metrics=["accuracy"]``; ``distrib_fit_spe8``:
  ``steps_per_execution=8``; ``distrib_fit_jit``: ``jit_compile=True``
  (``torch.compile``, inductor; compiling happens in the left-out steps);
* ``keras_fit`` / ``keras_fit_acc`` / ``keras_fit_jit``: Keras 3's own ``fit``
  on the torch backend (``KERAS_BACKEND=torch``), the peer to beat;
* ``lightning``: PyTorch Lightning's ``Trainer.fit`` over a ``DataLoader``.

Systems whose package is missing are skipped with a note. To compare source
trees (before/after a change) in one invocation pass ``--src`` several times
(e.g. ``--src /tmp/before/src --src src``): the distrib rows run once per tree.

With ``--counts`` two machine-independent columns are added: Python calls
and torch operator calls per step (each operator is about one kernel launch
on a GPU), counted in a separate run of each system.

Run: ``python bench/bench_step_cost.py [--rounds 3] [--counts] [--only torch_loop,distrib_fit] [--src DIR ...]``
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

IN, HIDDEN, OUT, BATCH = 32, 64, 10, 32
#: The clock of the step timestamps: wall time (default), or with ``BENCH_CLOCK=cpu`` this process's
#: CPU time, which another process's load changes much less (for runs on a busy machine).
_now = time.process_time if os.environ.get("BENCH_CLOCK") == "cpu" else time.perf_counter
SYSTEMS = ["torch_loop", "distrib_ctl", "distrib_ctl_same_step", "distrib_fit", "distrib_fit_torch_adam", "distrib_fit_acc",
           "distrib_fit_spe8", "distrib_fit_jit", "keras_fit", "keras_fit_acc", "keras_fit_jit", "lightning"]
USES_DISTRIB = {"distrib_ctl", "distrib_ctl_same_step", "distrib_fit", "distrib_fit_torch_adam", "distrib_fit_acc", "distrib_fit_spe8",
                "distrib_fit_jit"}
#: Steps between two timestamps (the batch-end hook runs once per execution).
STEPS_PER_STAMP = {"distrib_fit_spe8": 8}


def _data(torch, steps):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(steps * BATCH, IN, generator=gen)
    return x, x[:, :OUT].argmax(1)


def _module(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT))


# ------------------------------------------------------------------ systems (each returns step timestamps)
def torch_loop(steps, epochs):
    import torch
    import torch.nn.functional as F

    x, y = _data(torch, steps)
    model = _module(torch)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen, stamps = torch.Generator().manual_seed(1), []
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=gen)
        for step in range(steps):
            idx = order[step * BATCH:(step + 1) * BATCH]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            stamps.append(_now())
    return stamps


def distrib_ctl(steps, epochs, same_step=False):
    import torch
    import torch.nn.functional as F

    import distrib

    x, y = _data(torch, steps)
    strategy = distrib.get_strategy()
    with strategy.scope():
        model = _module(torch)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss(reduction="none")
    dataset = distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=1).batch(BATCH)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)

    def step_fn(inputs):
        xb, yb = inputs
        if same_step:  # the plain loop's own step (a mean over the local batch: right on one replica only)
            loss = F.cross_entropy(model(xb), yb)
        else:
            loss = distrib.nn.compute_average_loss(loss_fn(model(xb), yb), global_batch_size=BATCH)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    stamps = []
    for _ in range(epochs):
        for batch in dist_dataset:
            strategy.run(step_fn, args=(batch,))
            stamps.append(_now())
    return stamps


def distrib_ctl_same_step(steps, epochs):
    return distrib_ctl(steps, epochs, same_step=True)


def _distrib_fit(steps, epochs, optimizer, metrics, **compile_kwargs):
    import torch

    import distrib

    x, y = _data(torch, steps)
    stamps = []

    class Stamp(distrib.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            stamps.append(_now())

    with distrib.get_strategy().scope():
        model = distrib.Model(_module(torch))
        opt = (torch.optim.Adam(model.parameters(), lr=1e-3) if optimizer == "torch"
               else distrib.optimizers.Adam(learning_rate=1e-3))
        model.compile(optimizer=opt, metrics=metrics,
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True), **compile_kwargs)
    model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=[Stamp()])
    return stamps


def distrib_fit(steps, epochs):
    return _distrib_fit(steps, epochs, "keras", None)


def distrib_fit_torch_adam(steps, epochs):
    return _distrib_fit(steps, epochs, "torch", None)


def distrib_fit_acc(steps, epochs):
    return _distrib_fit(steps, epochs, "keras", ["accuracy"])


def distrib_fit_spe8(steps, epochs):
    return _distrib_fit(steps, epochs, "keras", None, steps_per_execution=8)


def distrib_fit_jit(steps, epochs):
    return _distrib_fit(steps, epochs, "keras", None, jit_compile=True)


def _keras_fit(steps, epochs, metrics, **compile_kwargs):
    os.environ["KERAS_BACKEND"] = "torch"
    import keras
    import torch

    x, y = _data(torch, steps)
    stamps = []

    class Stamp(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            stamps.append(_now())

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((IN,)), keras.layers.Dense(HIDDEN, activation="relu"),
                              keras.layers.Dense(OUT)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), metrics=metrics,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), **compile_kwargs)
    model.fit(x.numpy(), y.numpy(), batch_size=BATCH, epochs=epochs, verbose=0, callbacks=[Stamp()])
    return stamps


def keras_fit(steps, epochs):
    return _keras_fit(steps, epochs, None)


def keras_fit_acc(steps, epochs):
    return _keras_fit(steps, epochs, ["accuracy"])


def keras_fit_jit(steps, epochs):
    return _keras_fit(steps, epochs, None, jit_compile=True)


def lightning(steps, epochs):
    import pytorch_lightning as pl
    import torch
    import torch.nn.functional as F

    x, y = _data(torch, steps)
    stamps = []

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _module(torch)

        def training_step(self, batch, batch_idx):
            xb, yb = batch
            return F.cross_entropy(self.net(xb), yb)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    class Stamp(pl.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            stamps.append(_now())

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, callbacks=[Stamp()],
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Net(), loader)
    return stamps


# ------------------------------------------------------------------ driver
def _worker(system, steps, epochs, warmup):
    import torch

    torch.set_num_threads(1)
    stamps = globals()[system](steps, epochs)
    per = STEPS_PER_STAMP.get(system, 1)
    window = stamps[(warmup + per - 1) // per:]
    if len(window) < 2:
        raise SystemExit(f"{system}: only {len(stamps)} timestamps")
    gaps = [(b - a) / per for a, b in zip(window, window[1:])]
    print(json.dumps({"mean_us": (window[-1] - window[0]) / len(gaps) / per * 1e6,
                      "median_us": statistics.median(gaps) * 1e6, "steps": len(stamps) * per}))


def _counts(system):
    """Python calls and torch operator calls per step: machine-independent, so comparable across runs.

    The system runs a 40-step and an 80-step epoch under `cProfile`, then again under a
    counting ``TorchDispatchMode`` (each operator the dispatcher runs: on a GPU, about one
    kernel launch each); the difference over 40 steps leaves out what a fit does once.
    """
    import cProfile
    import pstats

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Ops.count += 1
            return func(*args, **(kwargs or {}))

    torch.set_num_threads(1)
    run = globals()[system]
    run(20, 1)  # imports, first builds
    calls, ops = [], []
    for steps in (40, 80):  # counted apart: the dispatch mode's own Python calls must not count
        profile = cProfile.Profile()
        profile.enable()
        run(steps, 1)
        profile.disable()
        calls.append(pstats.Stats(profile).total_calls)
        if not system.endswith("_jit"):  # torch.compile refuses to run under a dispatch mode
            Ops.count = 0
            with Ops():
                run(steps, 1)
            ops.append(Ops.count)
    print(json.dumps({"python_calls": (calls[1] - calls[0]) / 40,
                      "torch_ops": (ops[1] - ops[0]) / 40 if ops else None}))


def _available(system):
    module = "keras" if system.startswith("keras") else {"lightning": "pytorch_lightning"}.get(system)
    if module is None:
        return True
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                           env={**os.environ, "KERAS_BACKEND": "torch"})
    return probe.returncode == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=100, help="steps left out of each run's figure")
    parser.add_argument("--only", default=None, help="comma-separated systems (torch_loop always runs)")
    parser.add_argument("--src", action="append", help="a distrib source tree (repeat to compare)")
    parser.add_argument("--json", default=None, help="also write every run's figures here")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="time steps by wall clock or by each process's CPU time (steadier on a busy machine)")
    parser.add_argument("--counts", action="store_true",
                        help="also count Python calls and torch operators per step (machine-independent)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--count-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker, args.steps, args.epochs, args.warmup)
        return
    if args.count_worker:
        _counts(args.count_worker)
        return
    wanted = SYSTEMS if args.only is None else ["torch_loop"] + [s for s in args.only.split(",") if s != "torch_loop"]
    unknown = [s for s in wanted if s not in SYSTEMS]
    if unknown:
        raise SystemExit(f"unknown system(s) {unknown}; choose from {SYSTEMS}")
    skipped = [s for s in wanted if not _available(s)]
    for s in skipped:
        print(f"note: {s} skipped (its package is not installed)")
    srcs = [os.path.abspath(s) for s in (args.src or [os.path.join(os.path.dirname(__file__), "..", "src")])]
    runs = [(s, src) for s in wanted if s not in skipped for src in (srcs if s in USES_DISTRIB else srcs[:1])]
    figures = {run: [] for run in runs}
    failed = {}
    for round_ in range(args.rounds):
        for system, src in (runs if round_ % 2 == 0 else runs[::-1]):
            env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1", "BENCH_CLOCK": args.clock}
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", system, "--steps", str(args.steps),
                   "--epochs", str(args.epochs), "--warmup", str(args.warmup)]
            if failed.get((system, src)):
                continue
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
            if out.returncode != 0:  # e.g. an older source tree without the feature: say so, go on
                failed[(system, src)] = (out.stderr.strip().splitlines() or ["no output"])[-1][:150]
                continue
            figures[(system, src)].append(json.loads(out.stdout.strip().splitlines()[-1]))
    counts = {}
    if args.counts:
        for system, src in runs:
            env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1"}
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--count-worker", system], env=env,
                                 capture_output=True, text=True, timeout=1800)
            if out.returncode == 0:
                counts[(system, src)] = json.loads(out.stdout.strip().splitlines()[-1])
    base = figures[runs[0]]
    print(f"\n{args.rounds} rounds, {args.epochs} x {args.steps} steps, first {args.warmup} left out, "
          f"{args.clock} clock; "
          "ratio = mean step time / the plain loop's in the same round (median over rounds)\n")
    extra = " Python calls/step | torch ops/step |" if counts else ""
    print("| system | source | mean µs/step (median of rounds) | ratio to torch_loop | rounds |" + extra)
    print("|---|---|---:|---:|---|" + ("---:|---:|" if counts else ""))
    for (system, src), runs_of in figures.items():
        label = os.path.relpath(src) if system in USES_DISTRIB and len(srcs) > 1 else ""
        if (system, src) in failed:
            print(f"| {system} | {label} | failed: {failed[(system, src)]} | | |")
            continue
        ratios = [r["mean_us"] / b["mean_us"] for r, b in zip(runs_of, base)]
        row = (f"| {system} | {label} | {statistics.median(r['mean_us'] for r in runs_of):,.0f} | "
               f"{statistics.median(ratios):.2f}x | {' / '.join(f'{r:.2f}' for r in ratios)} |")
        if counts and (system, src) in counts:
            c = counts[(system, src)]
            ops = "n/a" if c["torch_ops"] is None else f"{c['torch_ops']:.1f}"
            row += f" {c['python_calls']:,.0f} | {ops} |"
        print(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{s}|{src}": v for (s, src), v in figures.items()}, f, indent=1)


if __name__ == "__main__":
    main()
