"""Per-step cost of distrib's Keras optimizers vs torch's own, as same-run ratios.

For each optimizer and two parameter sets — (a) the TF tutorials' MNIST CNN
(`bench/workloads.py` ``cnn``, 4 tensors, 2.77M parameters) and (b) 200
small tensors (64 floats each) — a worker process times blocks of ``step()``
calls of the distrib optimizer, of torch's counterpart with ``foreach=True``
and of torch's CPU default (``foreach=None``: the per-parameter for-loop),
interleaved block by block, and reports median(distrib) / median(torch).
Gradients are fixed random tensors; ``torch.set_num_threads(1)``.

To compare two source trees (e.g. before/after a change) in one invocation,
pass ``--src`` several times: the parent runs one worker per tree per round,
alternating trees round by round, and prints the median ratio per tree.

Run: python bench/bench_optimizers.py --src /tmp/before/src --src src [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# (label, distrib class name, distrib kwargs, torch class name, torch kwargs)
CASES = [
    ("SGD", "SGD", {"learning_rate": 0.01}, "SGD", {"lr": 0.01}),
    ("SGD momentum", "SGD", {"learning_rate": 0.01, "momentum": 0.9}, "SGD", {"lr": 0.01, "momentum": 0.9}),
    ("SGD nesterov", "SGD", {"learning_rate": 0.01, "momentum": 0.9, "nesterov": True},
     "SGD", {"lr": 0.01, "momentum": 0.9, "nesterov": True}),
    ("Adam", "Adam", {}, "Adam", {"lr": 0.001, "eps": 1e-7}),
    ("AdamW", "AdamW", {}, "AdamW", {"lr": 0.001, "eps": 1e-7, "weight_decay": 0.004}),
    ("RMSprop", "RMSprop", {}, "RMSprop", {"lr": 0.001, "alpha": 0.9, "eps": 1e-7}),
    ("RMSprop centered+momentum", "RMSprop", {"momentum": 0.9, "centered": True},
     "RMSprop", {"lr": 0.001, "alpha": 0.9, "eps": 1e-7, "momentum": 0.9, "centered": True}),
    ("Adagrad", "Adagrad", {}, "Adagrad", {"lr": 0.001, "initial_accumulator_value": 0.1, "eps": 1e-7}),
    ("Nadam", "Nadam", {}, "NAdam", {"lr": 0.001, "eps": 1e-7}),
    ("Adamax", "Adamax", {}, "Adamax", {"lr": 0.001, "eps": 1e-7}),
    ("Adadelta", "Adadelta", {}, "Adadelta", {"lr": 0.001, "rho": 0.95, "eps": 1e-7}),
]
# Lion and Ftrl have no torch counterpart; Lion is timed against torch's Adam (one slot fewer).
CASES.append(("Lion (vs torch Adam)", "Lion", {}, "Adam", {"lr": 0.001, "eps": 1e-7}))
WORKLOADS = ("cnn", "200 small")


def _shapes(workload):
    import torch
    sys.path.insert(0, HERE)
    from workloads import cnn  # noqa: E402

    if workload == "cnn":
        return [p.shape for p in cnn(torch).parameters()]
    return [(64,)] * 200


def _block(opt, steps):
    start = time.perf_counter()
    for _ in range(steps):
        opt.step()
    return (time.perf_counter() - start) / steps


def worker(blocks, quick):
    """Time every case in this process; print ``{label|workload: [vs foreach, vs default]}`` as JSON."""
    import torch

    from distrib import optimizers

    torch.set_num_threads(1)
    out = {}
    cases = CASES[:2] if quick else CASES
    for workload in WORKLOADS:
        shapes = _shapes(workload)
        steps = 3 if workload == "cnn" else 10
        gen = torch.Generator().manual_seed(0)
        grads = [torch.randn(s, generator=gen) * 1e-2 for s in shapes]
        for label, name, kwargs, torch_name, torch_kwargs in cases:
            def params():
                ps = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
                for p, g in zip(ps, grads):
                    p.grad = g.clone()
                return ps
            opts = [getattr(optimizers, name)(**kwargs).build(params()),
                    getattr(torch.optim, torch_name)(params(), foreach=True, **torch_kwargs),
                    getattr(torch.optim, torch_name)(params(), **torch_kwargs)]
            times = [[], [], []]
            for opt in opts:
                _block(opt, 2)  # builds the slots
            for _ in range(blocks):
                for index, opt in enumerate(opts):
                    times[index].append(_block(opt, steps))
            med = [statistics.median(t) for t in times]
            out[f"{label}|{workload}"] = [med[0] / med[1], med[0] / med[2], med[1] * 1e6]
    print(json.dumps(out))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", action="append", help="a distrib source tree (repeat to compare)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="two cases only (a smoke run)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.blocks, args.quick)
        return
    srcs = [os.path.abspath(s) for s in (args.src or [os.path.join(HERE, "..", "src")])]
    results = {src: [] for src in srcs}
    for round_ in range(args.rounds):
        for src in (srcs if round_ % 2 == 0 else srcs[::-1]):
            env = {**os.environ, "PYTHONPATH": src}
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--blocks", str(args.blocks)]
            run = subprocess.run(cmd + (["--quick"] if args.quick else []), env=env, capture_output=True,
                                 text=True, timeout=1800, check=True)
            results[src].append(json.loads(run.stdout.strip().splitlines()[-1]))
    keys = list(results[srcs[0]][0])
    head = " | ".join(f"{os.path.relpath(s)}: vs foreach / vs default" for s in srcs)
    print(f"| optimizer | params | torch foreach step (µs) | {head} |")
    print("|---|---|---:|" + "---:|" * len(srcs))
    for key in keys:
        label, workload = key.split("|")
        cells, torch_us = [], []
        for src in srcs:
            ratios = [r[key] for r in results[src]]
            torch_us += [r[2] for r in ratios]
            cells.append(f"{statistics.median(r[0] for r in ratios):.2f}x / "
                         f"{statistics.median(r[1] for r in ratios):.2f}x")
        print(f"| {label} | {workload} | {statistics.median(torch_us):,.0f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
