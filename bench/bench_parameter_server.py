"""Parameter-server step rate: N scheduled steps of a small MLP on chief + 2 workers + ps tasks.

Run: ``python bench/bench_parameter_server.py [--steps 300] [--ps 2] [--reps 3]``.
Each repetition launches the job with `distrib.launch.launch` (the same code
path as ``distrib launch --chief --workers 2 --ps M``); the chief times
``steps`` scheduled steps after a warm-up and prints the rate. The script
prints one line per repetition and the median, in steps per second.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.abspath(__file__)


def chief_program(steps: int) -> None:
    import torch

    from distrib.coordinator import ClusterCoordinator
    from distrib.strategies.parameter_server import ParameterServerStrategy

    strategy = ParameterServerStrategy()
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    coordinator = ClusterCoordinator(strategy)
    x, y = torch.randn(64, 32), torch.randn(64, 1)

    def step_fn():
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    for _ in range(20):
        coordinator.schedule(step_fn)
    coordinator.join()
    start = time.perf_counter()
    for _ in range(steps):
        coordinator.schedule(step_fn)
    coordinator.join()
    elapsed = time.perf_counter() - start
    print("BENCH " + json.dumps({"steps": steps, "seconds": elapsed, "rate": steps / elapsed}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    ns = parser.parse_args()
    from distrib.launch import launch

    rates = []
    for rep in range(ns.reps):
        result = launch(HERE, ["--task", str(ns.steps)], workers=2, chief=True, ps=ns.ps,
                        output="capture", timeout=600, env={"OMP_NUM_THREADS": "1"})
        if result.returncode != 0:
            sys.exit(f"bench: the job failed:\n{result.output[-4000:]}")
        line = [x for x in result.outputs["chief"].splitlines() if x.startswith("BENCH ")][-1]
        rate = json.loads(line[len("BENCH "):])["rate"]
        rates.append(rate)
        print(f"rep {rep}: {rate:.1f} steps/s", flush=True)
    print(f"median: {statistics.median(rates):.1f} steps/s over {ns.reps} runs "
          f"(min {min(rates):.1f}, max {max(rates):.1f}); chief + 2 workers + {ns.ps} ps, "
          f"{ns.steps} steps", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--task":
        chief_program(int(sys.argv[2]))
    else:
        main()
