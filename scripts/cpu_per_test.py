"""Where the suite's CPU goes: a pytest plugin that records each test's CPU, tasks included.

A test's own process is a small part of its cost: the tasks it launches, the
forks of the preloaded servers and the servers themselves run elsewhere. So
the plugin reads the *machine's* busy time (``/proc/stat``) before and after
each test. Run the suite in one pytest process on a quiet machine, and each
test's figure is what it cost::

    PYTHONPATH=src:scripts CPU_PER_TEST=/tmp/cpu.jsonl \\
        .venv/bin/python -m pytest tests -m "not slow" -p cpu_per_test
    python scripts/cpu_per_test.py /tmp/cpu.jsonl            # the 30 costliest files
    python scripts/cpu_per_test.py /tmp/cpu.jsonl /tmp/after.jsonl   # two runs, the tests both have

One JSON object per line: ``{"id": nodeid, "cpu": seconds, "wall": seconds}``.
Linux only; with ``-n`` the tests running beside each other are counted twice.
"""
from __future__ import annotations

import collections
import json
import os
import sys
import time
from typing import Dict, List, Tuple

_OUT = "CPU_PER_TEST"
_started: Dict[str, Tuple[float, float]] = {}


def busy_seconds() -> float:
    """CPU seconds the machine has spent busy (every state but idle and iowait) since boot."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def pytest_runtest_protocol(item, nextitem):  # noqa: ANN001 - pytest hook
    _started[item.nodeid] = (busy_seconds(), time.monotonic())


def pytest_runtest_logfinish(nodeid, location):  # noqa: ANN001 - pytest hook
    start = _started.pop(nodeid, None)
    if start is None:
        return
    record = {"id": nodeid, "cpu": round(busy_seconds() - start[0], 3), "wall": round(time.monotonic() - start[1], 3)}
    with open(os.environ.get(_OUT, "cpu_per_test.jsonl"), "a") as out:
        out.write(json.dumps(record) + "\n")


def _load(path: str) -> Dict[str, dict]:
    with open(path) as f:
        return {r["id"]: r for r in map(json.loads, f)}


def _report(paths: List[str]) -> None:
    runs = [_load(p) for p in paths]
    if len(runs) == 1:
        (run,) = runs
        files: Dict[str, float] = collections.Counter()
        for record in run.values():
            files[record["id"].split("::")[0]] += record["cpu"]
        print(f"{len(run)} tests, {sum(r['cpu'] for r in run.values()):.0f} s of CPU")
        for name, cpu in files.most_common(30):
            print(f"{cpu:8.1f}  {name}")
        return
    before, after = runs[0], runs[-1]
    common = [k for k in after if k in before]
    for key in ("cpu", "wall"):
        a, b = sum(before[k][key] for k in common), sum(after[k][key] for k in common)
        print(f"{len(common)} tests in both: {key} {a:.0f} s -> {b:.0f} s ({b / a:.2f}x)")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    _report(sys.argv[1:])
