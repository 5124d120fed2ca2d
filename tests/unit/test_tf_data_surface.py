"""distrib's tf.data surface, metrics and StringLookup against TensorFlow 2.21's recorded outputs.

tests/tf_reference/generate_surface.py ran the same programs on TensorFlow
(tests/data/tf_reference/data_surface.json); this replays them without TF.
"""
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

TF_REFERENCE = Path(__file__).resolve().parents[1] / "tf_reference"
sys.path.insert(0, str(TF_REFERENCE))

from replay_surface import elements, lookups, metrics  # noqa: E402
from surface_scenarios import UNORDERED  # noqa: E402

REFERENCE = json.loads((TF_REFERENCE.parent / "data" / "tf_reference" / "data_surface.json").read_text())


@pytest.fixture(scope="module")
def got_elements():
    return elements()


@pytest.mark.parametrize("name", sorted(REFERENCE["elements"]))
def test_pipeline_elements_match_tensorflow(got_elements, name):
    want, have = REFERENCE["elements"][name], got_elements[name]
    assert "steps" in want, f"TensorFlow raised on {name}: {want}"
    assert "steps" in have, f"distrib raised on {name}: {have}"
    if name in UNORDERED:  # shuffles: each library its own order; same batch sizes and examples
        assert [len(b) for b in have["steps"]] == [len(b) for b in want["steps"]]
        assert Counter(sum(have["steps"], [])) == Counter(sum(want["steps"], []))
    else:
        assert have["steps"] == want["steps"]


def _close(a, b):
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return abs(a - b) <= 1e-6


def test_metrics_match_keras():
    got = metrics()
    for name, want in REFERENCE["metrics"].items():
        assert _close(got[name], want), f"{name}: distrib {got[name]} vs Keras {want}"


def test_string_lookup_matches_keras():
    got = lookups()
    for name, want in REFERENCE["lookup"].items():
        assert got[name] == want, f"{name}: distrib {got[name]} vs Keras {want}"
