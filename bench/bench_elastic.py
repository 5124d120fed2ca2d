"""What ``distrib launch --elastic`` costs: per step without a failure, and from a death to training again.

One invocation measures both, interleaved round after round (machines here are noisy):

* **no fault**: the same job (`elastic_job.py`: `fit` with `BackupAndRestore`) with
  and without ``--elastic``, on the TF tutorials' MNIST CNN (2.8M parameters, 64 images per
  worker and step; 200 steps) and on a tiny model (Linear 32->64->10, global
  batch 32, a step that is almost all framework overhead; 2000 steps). A run's
  figure is the chief's mean step time (wall clock) over its second half of
  steps (the steady state: the log's buffers recycled, snapshots taken at their
  steady pace); each row reports the
  median over rounds of the per-round ratio elastic / plain (the two runs of a
  round are back to back, in alternating order), with its range, and the same
  ratio of process CPU time per step, which the other processes on the machine
  disturb less.
* **recovery**: the tiny job under ``--elastic`` on 2, 4 and 8 workers, worker 1
  (then the chief) SIGKILLed at the end of step KILL; the time from the death to
  the first step the job completes afterwards (the survivors' next step, once the
  replacement has joined and caught up), beside the same kill under
  ``--max-restarts 1`` without ``--elastic`` (every task restarts from the last
  backup, ``save_freq=10``).

Usage: python bench/bench_elastic.py [--rounds 3] [--workers 2] [--sizes 2,4,8] [--kill 30]
       [--only cost|recovery]
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import statistics
import sys
import tempfile
from typing import Dict, List, Tuple

from distrib.launch import launch

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_job.py")
COST_STEPS = {"cnn": 200, "tiny": 2000}
RECOVERY_STEPS = 60
NEVER = 10 ** 9


def _rows(out: str, task: int = -1) -> List[Tuple[int, float, float, int]]:
    rows = []
    for path in glob.glob(os.path.join(out, f"steps-{task if task >= 0 else '*'}-*.txt")):
        with open(path) as f:
            rows += [(int(a), float(b), float(c), int(d)) for a, b, c, d in (line.split() for line in f if line.strip())]
    return rows


def _launch(args: list, workers: int, elastic: bool, env: Dict[str, str]) -> str:
    out = tempfile.mkdtemp(prefix="bench-elastic-")
    result = launch(JOB, [out, *args], workers=workers, elastic=elastic, max_restarts=1, output="capture",
                    timeout=900, grace_seconds=5, env=env)
    if result.returncode != 0:
        sys.exit(f"the job failed ({'elastic' if elastic else 'plain'}, {args}):\n{result.output[-3000:]}")
    return out + "\n" + result.output


def cost_run(model: str, elastic: bool, workers: int) -> Dict[str, float]:
    """The chief's steady step time and CPU time per step (seconds)."""
    steps = COST_STEPS[model]
    out, _ = _launch([model, steps, -1, -1, NEVER], workers, elastic, {}).split("\n", 1)
    rows = sorted(r for r in _rows(out, 0))
    shutil.rmtree(out, ignore_errors=True)
    steady = rows[len(rows) // 2:]
    n = len(steady) - 1
    return {"step": (steady[-1][1] - steady[0][1]) / n, "cpu": (steady[-1][2] - steady[0][2]) / n}


def recovery_run(workers: int, victim: int, elastic: bool, kill: int) -> Dict[str, float]:
    """Seconds from the death to the first step completed afterwards; for elastic, the survivors' own
    account of forming the new generation too."""
    out, output = _launch(["tiny", RECOVERY_STEPS, kill, victim, 10], workers, elastic, {}).split("\n", 1)
    with open(os.path.join(out, "killed")) as f:
        killed = float(f.read())
    rows = _rows(out)
    shutil.rmtree(out, ignore_errors=True)
    row = {"again": min(t for s, t, _, attempt in rows if t > killed and (s > kill or attempt > 0)) - killed}
    formed = [float(x) for x in re.findall(r"generation 1 formed in ([0-9.]+)s", output)]
    if formed:
        row["formed"] = max(formed)
    return row


def _spread(values: List[float], scale: float = 1.0, fmt: str = "{:.1f}") -> str:
    return (f"{fmt.format(scale * statistics.median(values))} "
            f"[{fmt.format(scale * min(values))}-{fmt.format(scale * max(values))}]")


def cost(rounds: int, workers: int) -> None:
    runs: Dict[Tuple[str, bool], List[Dict[str, float]]] = {}
    for r in range(rounds):
        for model in COST_STEPS:
            order = (False, True) if r % 2 == 0 else (True, False)
            for elastic in order:
                runs.setdefault((model, elastic), []).append(cost_run(model, elastic, workers))
            plain, el = runs[(model, False)][-1], runs[(model, True)][-1]
            print(f"round {r + 1} {model}: plain {1000 * plain['step']:.2f} ms, elastic {1000 * el['step']:.2f} ms "
                  f"({el['step'] / plain['step']:.3f}x; CPU {el['cpu'] / plain['cpu']:.3f}x)", flush=True)
    print(f"\nno fault, {workers} workers, medians of {rounds} rounds [min-max]\n")
    print("| model | plain step (ms) | --elastic step (ms) | elastic / plain, wall | elastic / plain, CPU |")
    print("|---|---:|---:|---:|---:|")
    for model in COST_STEPS:
        plain, el = runs[(model, False)], runs[(model, True)]
        wall = [e["step"] / p["step"] for p, e in zip(plain, el)]
        cpu = [e["cpu"] / p["cpu"] for p, e in zip(plain, el)]
        print(f"| {model} | {_spread([p['step'] for p in plain], 1000)} | {_spread([e['step'] for e in el], 1000)} "
              f"| {_spread(wall, fmt='{:.3f}')}x | {_spread(cpu, fmt='{:.3f}')}x |")


def recovery(rounds: int, sizes: List[int], kill: int) -> None:
    cases = [(w, victim, elastic) for w in sizes for victim, elastic in ((1, True), (0, True), (1, False))]
    runs: Dict[Tuple[int, int, bool], List[Dict[str, float]]] = {}
    for r in range(rounds):
        for case in cases:
            runs.setdefault(case, []).append(recovery_run(case[0], case[1], case[2], kill))
            print(f"round {r + 1} {case}: {runs[case][-1]}", flush=True)
    print(f"\nrecovery: the tiny job, killed at the end of step {kill}; seconds from the death to the first step "
          f"completed afterwards, medians of {rounds} rounds [min-max]\n")
    print("| workers | elastic, worker 1 lost | elastic, chief lost | restart from backup (worker 1 lost) | "
          "elastic / restart |")
    print("|---:|---:|---:|---:|---:|")
    for w in sizes:
        worker, chief, restart = (runs[(w, 1, True)], runs[(w, 0, True)], runs[(w, 1, False)])
        ratio = statistics.median(x["again"] for x in worker) / statistics.median(x["again"] for x in restart)
        print(f"| {w} | {_spread([x['again'] for x in worker], fmt='{:.2f}')} | "
              f"{_spread([x['again'] for x in chief], fmt='{:.2f}')} | "
              f"{_spread([x['again'] for x in restart], fmt='{:.2f}')} | {ratio:.2f}x |")
    formed = {w: [x["formed"] for x in runs[(w, 1, True)] if "formed" in x] for w in sizes}
    print("\nof which the survivors waited for the new generation to form (the replacement started and joined): "
          + ", ".join(f"{w} workers {statistics.median(v):.2f} s" for w, v in formed.items() if v))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="workers of the no-fault runs")
    parser.add_argument("--sizes", default="2,4,8", help="workers of the recovery runs")
    parser.add_argument("--kill", type=int, default=30)
    parser.add_argument("--only", choices=["cost", "recovery"])
    ns = parser.parse_args()
    if ns.only != "recovery":
        cost(ns.rounds, ns.workers)
    if ns.only != "cost":
        recovery(ns.rounds, [int(w) for w in ns.sizes.split(",")], ns.kill)


if __name__ == "__main__":
    main()
