"""``distrib.image``'s deterministic ops against TensorFlow 2.21's recorded outputs (issue 39, item 5).

tests/tf_reference/generate_image_ops.py ran `image_ops_scenarios.py` on
TensorFlow (tests/data/tf_reference/image_ops.json): shapes, dtypes, values
and refusals. This replays the same calls on distrib.
"""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

TF_REFERENCE = Path(__file__).resolve().parents[1] / "tf_reference"
sys.path.insert(0, str(TF_REFERENCE))

from image_ops_scenarios import describe, scenarios  # noqa: E402

import distrib  # noqa: E402

REFERENCE = json.loads((TF_REFERENCE.parent / "data" / "tf_reference" / "image_ops.json").read_text())["scenarios"]


class Ops:
    def tensor(self, array):
        return torch.from_numpy(array.copy())

    def dtype(self, name):
        return getattr(torch, name)


@pytest.fixture(scope="module")
def got():
    return {name: describe(make) for name, make in scenarios(distrib.image, Ops()).items()}


def test_every_scenario_was_recorded(got):
    assert sorted(got) == sorted(REFERENCE)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_op_matches_tensorflow(got, name):
    want, have = REFERENCE[name], got[name]
    if "error" in want:
        assert have.get("error") == "ValueError", f"TensorFlow raised {want['error']}, distrib gave {have}"
        return
    assert "error" not in have, f"distrib raised {have['error']}"
    assert (have["shape"], have["dtype"]) == (want["shape"], want["dtype"])
    if want["dtype"].startswith(("uint", "int")):
        np.testing.assert_array_equal(have["values"], want["values"])
    else:
        np.testing.assert_allclose(have["values"], want["values"], rtol=1e-5, atol=1e-6)
