"""The suite's opening line: the count, the expected time scaled from measured weights, the seed (issue 50)."""
from __future__ import annotations

import doctest
import subprocess
import sys
from pathlib import Path

import suite_timing

ROOT = Path(__file__).resolve().parents[2]


def test_the_docstring_examples_hold():
    assert doctest.testmod(suite_timing).failed == 0


def test_the_stored_weights_cover_the_test_files():
    data = suite_timing.json.loads(suite_timing._DATA.read_text(encoding="utf-8"))
    assert data["reference_minutes"] > 0 and data["reference_processes"] >= 1
    listed = {name for name in data["files"]}
    assert all((ROOT / name).is_file() for name in listed), "suite_timing.json names a file that is gone"
    assert len(listed) >= 100


def test_the_line_names_count_time_and_seed():
    line = suite_timing.announcement(["tests/unit/test_suite_timing.py::x"] * 3, 2, 1234)
    assert line.startswith("3 tests in 2 pytest processes, expected about ")
    assert "--randomly-seed=1234" in line
    assert "-p no:randomly" in suite_timing.announcement(["a::b"], 1, None)


def test_a_pytest_run_says_it_before_its_first_test(tmp_path):
    """A real pytest run of one file: the line comes before the result, once."""
    run = subprocess.run([sys.executable, "-m", "pytest", "tests/unit/test_suite_timing.py", "-q",
                          "-p", "no:cacheprovider", "-k", "names_count", "--randomly-seed=77"],
                         cwd=ROOT, capture_output=True, text=True, timeout=240)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    lines = [line for line in out.splitlines() if "expected about" in line]
    assert lines == [lines[0]] and lines[0].startswith("1 test in one pytest process, expected about 1 minute on")
    assert "--randomly-seed=77" in lines[0]
    assert out.index("expected about") < out.index("passed")
