"""Attribute probing stays rare and explained: ``getattr(obj, "name", None)`` only where the type is not ours.

Where distrib owns the type (a strategy, a collective, a checkpoint, a model),
an attribute is part of an interface and read plainly; a probe is left only
for objects of the user's or of other libraries whose attributes are
optional (a Keras-style ``get_config``, a sampler's ``generator``, a
callable's ``__qualname__``), each with a comment saying why, in the one
function that asks for that fact.
"""
from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "distrib"
PROBE = re.compile(r'getattr\([^()]*, *"[A-Za-z_]+", *None\)')
#: The probes left when this test was written (issue 43): it may only shrink.
MAX_PROBES = 15


def _probes():
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if PROBE.search(line):
                yield f"{path.relative_to(PACKAGE.parent).as_posix()}:{number}", line


def test_probes_are_few():
    found = list(_probes())
    assert len(found) <= MAX_PROBES, (
        f"{len(found)} getattr(obj, 'name', None) probes, at most {MAX_PROBES}: where the type is distrib's, "
        "make the attribute part of its interface; otherwise ask in the one function that owns the fact:\n"
        + "\n".join(where for where, _ in found))


def test_every_probe_says_why():
    unexplained = [where for where, line in _probes() if "#" not in line.split("getattr(", 1)[1]]
    assert not unexplained, "a probe without a comment saying why the attribute may be absent: " + ", ".join(unexplained)
