"""Fixtures shared by unit and distributed tests (keep this file small)."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Callable

import pytest

# The suite runs on CPU, GPU host or not: its multi-process tests compare CPU
# runs bit for bit (with each other, with references computed here, with
# TensorFlow's CPU outputs), and a task that found a GPU would train there.
# So the GPUs are hidden before anything asks torch about CUDA. The tests
# marked `cuda` need a GPU: `DISTRIB_TEST_GPU=1 pytest -m cuda` runs them with
# the GPUs visible (./scripts/test.sh does so where torch sees one).
if os.environ.get("DISTRIB_TEST_GPU") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""


@pytest.fixture
def write_script(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write a small dedented Python file under ``tmp_path`` and return its path.

    Example:
        >>> path = write_script("hello.py", '''
        ...     print("hello")
        ... ''')
    """

    def write(name: str, source: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
        return path

    return write

