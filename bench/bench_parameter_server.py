"""Parameter-server step rate: N scheduled steps of a small MLP on chief + 2 workers + ps tasks.

Run: ``python bench/bench_parameter_server.py [--steps 300] [--ps 2] [--reps 3] [--src DIR ...]``.
Each repetition launches the job with `distrib.launch.launch` (the same code
path as ``distrib launch --chief --workers 2 --ps M``), with a job secret
set as `distrib launch` sets it; the chief times ``steps`` scheduled steps
after a warm-up and prints the rate. With several ``--src`` directories
(e.g. this tree's ``src`` and a ``git archive`` of an older commit's) the
tasks import distrib from each in turn, interleaved, so the medians compare
the same machine at the same time. Prints one line per run and the medians.

With ``--mode pickled --mode registered`` it compares the two ways a
scheduled function travels (``DISTRIB_PS_FUNCTIONS``) the same way. The
step function and the model builder are registered functions either way and
take the model and optimizer as arguments, so both modes run the same program.

Example:
    $ python bench/bench_parameter_server.py --reps 5 --src /tmp/before/src --src src
    $ python bench/bench_parameter_server.py --reps 5 --mode pickled --mode registered
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Dict, List

import torch

try:
    from distrib.coordinator import remote_function
except ImportError:  # an older distrib under --src: functions travel by value only
    def remote_function(fn):
        return fn

HERE = os.path.abspath(__file__)


@remote_function
def build_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


@remote_function
def step_fn(model, optimizer, x, y):
    loss = ((model(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


def chief_program(steps: int) -> None:
    from distrib.coordinator import ClusterCoordinator
    from distrib.strategies.parameter_server import ParameterServerStrategy

    strategy = ParameterServerStrategy()
    with strategy.scope():
        model = build_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    coordinator = ClusterCoordinator(strategy)
    x, y = torch.randn(64, 32), torch.randn(64, 1)
    for _ in range(20):
        coordinator.schedule(step_fn, args=(model, optimizer, x, y))
    coordinator.join()
    start = time.perf_counter()
    for _ in range(steps):
        coordinator.schedule(step_fn, args=(model, optimizer, x, y))
    coordinator.join()
    elapsed = time.perf_counter() - start
    print("BENCH " + json.dumps({"steps": steps, "seconds": elapsed, "rate": steps / elapsed}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--src", action="append", default=None,
                        help="a directory to import distrib from in the tasks (repeatable)")
    parser.add_argument("--mode", action="append", default=None, choices=("pickled", "registered"),
                        help="DISTRIB_PS_FUNCTIONS for the tasks (repeatable; default pickled)")
    ns = parser.parse_args()
    from distrib.comm.secret import new_secret
    from distrib.launch import launch

    sources = ns.src or [os.environ.get("PYTHONPATH", "")]
    runs = [(src, mode) for src in sources for mode in (ns.mode or ["pickled"])]
    rates: Dict[str, List[float]] = {}
    for rep in range(ns.reps):
        for src, mode in runs:
            label = f"{src or '(PYTHONPATH)'} {mode}"
            env = {"OMP_NUM_THREADS": "1", "DISTRIB_JOB_SECRET": new_secret(), "DISTRIB_PS_FUNCTIONS": mode,
                   "PYTHONPATH": os.path.abspath(src) if src else ""}
            result = launch(HERE, ["--task", str(ns.steps)], workers=2, chief=True, ps=ns.ps,
                            output="capture", timeout=600, env=env)
            if result.returncode != 0:
                sys.exit(f"bench: the job failed ({label}):\n{result.output[-4000:]}")
            line = [x for x in result.outputs["chief"].splitlines() if x.startswith("BENCH ")][-1]
            rate = json.loads(line[len("BENCH "):])["rate"]
            rates.setdefault(label, []).append(rate)
            print(f"rep {rep} {label}: {rate:.1f} steps/s", flush=True)
    for label, values in rates.items():
        print(f"median {label}: {statistics.median(values):.1f} steps/s over "
              f"{len(values)} runs (min {min(values):.1f}, max {max(values):.1f}); chief + 2 workers "
              f"+ {ns.ps} ps, {ns.steps} steps", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--task":
        chief_program(int(sys.argv[2]))
    else:
        main()
