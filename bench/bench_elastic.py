"""Time from a worker's death to training again: elastic recovery vs restart from the last backup.

The same job (`elastic_job.py`: 3 workers, `fit` with `BackupAndRestore(save_freq=10)`,
a 0.8M-parameter MLP, 60 steps) is run under ``distrib launch`` in four ways,
interleaved in each round:

* ``elastic``: ``--elastic``; worker 1 is SIGKILLed at the end of step KILL;
* ``restart``: ``--max-restarts 1``, no ``--elastic``; the same kill; everything restarts from
  backup-KILL//10*10;
* ``elastic, no fault`` and ``plain, no fault``: the steady step time with and without
  elastic's per-step snapshots and collective log.

Reported per faulty run (medians over rounds): seconds from the death to the first
step the job completes afterwards (the next step for elastic, the first step of the
restarted attempt for restart), and to the completion of the step after the one at
which the worker died (the lost work redone).

Usage: python bench/bench_elastic.py [--rounds 3] [--kill 35]
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import statistics
import sys
import tempfile
import time

from distrib.launch import launch

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_job.py")


def _steps(out: str):
    rows = []
    for path in glob.glob(os.path.join(out, "steps-*.txt")):
        with open(path) as f:
            rows += [(int(a), float(b), int(c)) for a, b, c in (line.split() for line in f if line.strip())]
    return rows


def run(mode: str, kill: int) -> dict:
    out = tempfile.mkdtemp(prefix=f"bench-elastic-{mode.replace(' ', '-').replace(',', '')}-")
    elastic = mode.startswith("elastic")
    faulty = "no fault" not in mode
    start = time.time()
    result = launch(JOB, [out, kill if faulty else -1], workers=3, elastic=elastic, max_restarts=1,
                    output="capture", timeout=600, grace_seconds=5)
    wall = time.time() - start
    if result.returncode != 0:
        sys.exit(f"{mode}: the job failed:\n{result.output[-3000:]}")
    rows = _steps(out)
    row = {"wall": wall}
    if faulty:
        with open(os.path.join(out, "killed")) as f:
            killed = float(f.read())
        # the first step the job completes after the death: the next one (elastic) or the first of the
        # restarted attempt (restart); then the first step past the one at which the worker died
        row["again"] = min(t for s, t, attempt in rows if t > killed and (s > kill or attempt > 0)) - killed
        row["back"] = min(t for s, t, _ in rows if t > killed and s > kill) - killed
        if elastic:  # the survivors' own account: death noticed -> generation formed (replacement joined)
            formed = [float(x) for x in re.findall(r"generation 1 formed in ([0-9.]+)s", result.output)]
            row["formed"] = max(formed)
    else:
        ends = sorted(t for s, t, _ in rows if s > 5)  # steady state, all workers' step ends
        row["step"] = (max(ends) - min(ends)) / max(1, len(ends) / 3 - 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kill", type=int, default=35)
    ns = parser.parse_args()
    modes = ["elastic", "restart", "elastic, no fault", "plain, no fault"]
    results = {m: [] for m in modes}
    for r in range(ns.rounds):
        for mode in modes:
            results[mode].append(run(mode, ns.kill))
            print(f"round {r + 1} {mode}: {results[mode][-1]}", flush=True)
    med = {m: {k: statistics.median(x[k] for x in rows) for k in rows[0]} for m, rows in results.items()}
    rng = {m: {k: (min(x[k] for x in rows), max(x[k] for x in rows)) for k in rows[0]} for m, rows in results.items()}
    print(f"\nkill: worker 1 at the end of step {ns.kill}; restart resumes from backup-{ns.kill // 10 * 10}; "
          f"medians of {ns.rounds} rounds [min-max]\n")
    print("| recovery | death -> a step completes again (s) | death -> the step after the death completes (s) | whole job (s) |")
    print("|---|---:|---:|---:|")
    for m in ("elastic", "restart"):
        cells = [f"{med[m][k]:.2f} [{rng[m][k][0]:.2f}-{rng[m][k][1]:.2f}]" for k in ("again", "back", "wall")]
        print(f"| {m} | " + " | ".join(cells) + " |")
    print(f"| ratio elastic / restart | {med['elastic']['again'] / med['restart']['again']:.2f}x | "
          f"{med['elastic']['back'] / med['restart']['back']:.2f}x | "
          f"{med['elastic']['wall'] / med['restart']['wall']:.2f}x |")
    print(f"\nelastic: the survivors formed the new generation (the replacement started, imported torch and "
          f"joined) {med['elastic']['formed']:.2f} s after noticing the loss (median); the rest is the "
          f"replacement's catch-up from the snapshot")
    print("\n| no fault | step time (ms) | whole job (s) |")
    print("|---|---:|---:|")
    for m in ("plain, no fault", "elastic, no fault"):
        print(f"| {m} | {1000 * med[m]['step']:.1f} [{1000 * rng[m]['step'][0]:.1f}-{1000 * rng[m]['step'][1]:.1f}] "
              f"| {med[m]['wall']:.1f} |")
    print(f"| ratio elastic / plain | {med['elastic, no fault']['step'] / med['plain, no fault']['step']:.2f}x | "
          f"{med['elastic, no fault']['wall'] / med['plain, no fault']['wall']:.2f}x |")


if __name__ == "__main__":
    main()
