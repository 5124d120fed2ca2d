"""Seed 003's Keras snippet (examples/guide_keras.py) runs under each single-machine strategy."""
import os
from pathlib import Path

import pytest

from distrib.testing import run_python

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "guide_keras.py"


@pytest.mark.parametrize("strategy,replicas", [("one_device", 1), ("central_storage", 2), ("mirrored", 2)])
def test_guide_snippet(strategy, replicas):
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["OMP_NUM_THREADS"] = "1"  # as the harness's clusters have it: local replicas fork where replica 0 does
    proc = run_python([str(EXAMPLE), "--strategy", strategy], env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count(f"num_replicas_in_sync: {replicas}") == 1, proc.stdout[-2000:]
    assert proc.stdout.count("Epoch 1/2") == 2      # two fits, printed once each (not per replica)
