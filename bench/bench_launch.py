"""Task start-up under `distrib launch`: forks of the preloaded server vs new processes, same run.

Each case launches N tasks of a script that imports what a training script
imports (torch, distrib) and exits, in the three modes of
``DISTRIB_LAUNCH_FORK`` interleaved round by round: ``0`` (new processes
only), ``spare`` (the default: new processes first, a fork server stands by
for restarts) and ``1`` (every task a fork). It reports, per mode, the median
wall time of the whole launch and the median CPU time of the launch's
processes (user + system, from ``RUSAGE_CHILDREN``), and each mode's ratio to
``0``. The "restart" case makes the first attempt fail in every task, so the
launcher starts every task twice (``max_restarts=1``); "start" runs once
(``max_restarts=0``, where ``spare`` starts no server).

Run: python bench/bench_launch.py [--rounds 5] [--tasks 2 4]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

from distrib.launch import launch

_SCRIPT = """
import os, sys
import torch
import distrib, distrib.strategies, distrib.training
if sys.argv[1] == "restart" and os.environ["DISTRIB_RESTART_COUNT"] == "0":
    sys.exit(1)
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _one(script: str, tasks: int, case: str, mode: str) -> tuple:
    cpu, start = _children_cpu(), time.perf_counter()
    result = launch(script, [case], workers=tasks, output="capture", timeout=300,
                    max_restarts=1 if case == "restart" else 0, env={"DISTRIB_LAUNCH_FORK": mode})
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"launch failed: {result.output}")
    return wall, _children_cpu() - cpu


_MODES = ("0", "spare", "1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "start.py")
        with open(script, "w", encoding="utf-8") as handle:
            handle.write(_SCRIPT)
        print(f"cores: {os.cpu_count()}, python {sys.version.split()[0]}, rounds: {args.rounds}")
        print("| tasks | case | mode | wall (s) | wall / mode 0 | CPU (s) | CPU / mode 0 |")
        print("|---:|---|---|---:|---:|---:|---:|")
        for tasks in args.tasks:
            for case in ("start", "restart"):
                seen = {m: [] for m in _MODES}
                for _ in range(args.rounds):
                    for mode in _MODES:
                        seen[mode].append(_one(script, tasks, case, mode))
                wall = {m: statistics.median(w for w, _ in seen[m]) for m in _MODES}
                cpu = {m: statistics.median(c for _, c in seen[m]) for m in _MODES}
                for mode in _MODES:
                    print(f"| {tasks} | {case} | {mode} | {wall[mode]:.2f} | {wall[mode] / wall['0']:.2f}x "
                          f"| {cpu[mode]:.2f} | {cpu[mode] / cpu['0']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
