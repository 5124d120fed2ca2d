"""Every module under src/distrib stays small: at most 400 lines, one concern each.

A module that grows past the limit is cut along its concepts (a helper
module, a mixin, the encoding apart from what uses it), with its public names
still importable from where they were.
"""
from __future__ import annotations

from pathlib import Path

MAX_LINES = 400
PACKAGE = Path(__file__).resolve().parents[2] / "src" / "distrib"


def _line_count(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


def test_every_module_is_at_most_400_lines():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert modules, f"no modules found under {PACKAGE}"
    too_long = [(path.relative_to(PACKAGE.parent).as_posix(), n) for path in modules
                if (n := _line_count(path)) > MAX_LINES]
    assert not too_long, (
        f"modules must be at most {MAX_LINES} lines (one concern each; cut a longer one along its concepts "
        "and keep its public names importable from the old module): "
        + ", ".join(f"{name} ({n} lines)" for name, n in too_long))
