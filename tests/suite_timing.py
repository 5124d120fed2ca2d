"""What the suite says before its first dot: how many tests, the expected time, the order's seed.

The expected time is the last measurement on 2 idle cores (``reference_minutes``
in suite_timing.json, for the default run then) scaled by the selected tests'
weights: each test weighs its file's measured seconds per test (files measured
since weigh the mean). See docs/testing.md.
"""
from __future__ import annotations

import json
import pathlib
from typing import Iterable, Optional

__all__ = ["expected_minutes", "announcement", "HOLD_ON"]

_DATA = pathlib.Path(__file__).with_name("suite_timing.json")

#: Said while the pytest processes start: each imports torch and collects every test file first.
HOLD_ON = ("starting {n} pytest process(es): each imports torch and collects the test files before the "
           "first dot (under a minute on 2 idle cores, a few on a busy machine)")


def expected_minutes(nodeids: Iterable[str], processes: int, data: Optional[dict] = None) -> float:
    """Minutes the tests ``nodeids`` should take on 2 idle cores in ``processes`` pytest processes.

    ``data["files"]`` maps a test file to ``[tests, seconds]`` measured in the reference run, which
    took ``reference_minutes`` in ``reference_processes`` processes.

    Example:
        >>> data = {"reference_minutes": 6.0, "reference_processes": 2,
        ...         "files": {"tests/a.py": [2, 2.0], "tests/b.py": [1, 6.0]}}
        >>> expected_minutes(["tests/a.py::x", "tests/a.py::y", "tests/b.py::z"], 2, data)
        6.0
        >>> expected_minutes(["tests/b.py::z"], 1, data)
        9.0
    """
    data = json.loads(_DATA.read_text(encoding="utf-8")) if data is None else data
    files = data["files"]
    reference = sum(seconds for _, seconds in files.values())
    mean = reference / max(sum(tests for tests, _ in files.values()), 1)
    rate = {name: seconds / max(tests, 1) for name, (tests, seconds) in files.items()}
    weight = sum(rate.get(nodeid.split("::")[0], mean) for nodeid in nodeids)
    share = weight / reference if reference else 0.0
    return data["reference_minutes"] * share * data["reference_processes"] / max(processes, 1)


def announcement(nodeids: list, processes: int, seed: Optional[int]) -> str:
    """The line printed once collection is done."""
    minutes = expected_minutes(nodeids, processes)
    where = f"in {processes} pytest processes" if processes > 1 else "in one pytest process"
    order = ("in file order (-p no:randomly)" if seed is None else
             f"in a shuffled order, --randomly-seed={seed} (pass it to replay this order)")
    count = f"{len(nodeids)} test" + ("" if len(nodeids) == 1 else "s")
    rounded = max(round(minutes), 1)
    return (f"{count} {where}, expected about {rounded} minute{'' if rounded == 1 else 's'} on 2 idle cores "
            f"(longer on a busy machine), {order}")
