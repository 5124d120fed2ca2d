"""The guide's ParameterServerStrategy + Model.fit (examples/guide_ps_fit.py) on chief + 2 workers + 2 ps.

Uses `distrib.data.experimental.DatasetCreator`, Model.fit under the
parameter-server strategy and `distrib.callbacks.ModelCheckpoint`.
"""
import re
from pathlib import Path

import pytest

import distrib
from distrib.comm.secret import new_secret
from distrib.launch import launch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "guide_ps_fit.py"


@pytest.mark.slow
def test_guide_ps_fit_trains_with_callbacks(tmp_path):
    env = {"PS_FIT_DIR": str(tmp_path), "PS_FIT_EPOCHS": "3", "PS_FIT_STEPS": "10",
           "OMP_NUM_THREADS": "1", "DISTRIB_JOB_SECRET": new_secret()}
    result = launch(str(EXAMPLE), workers=2, chief=True, ps=2, output="capture", timeout=300,
                    grace_seconds=5, env=env)
    assert result.returncode == 0, result.output[-6000:]
    lines = re.findall(r"^Loss per epoch: (.*)$", result.outputs["chief"], re.M)
    assert len(lines) == 1, result.outputs["chief"][-3000:]
    losses = [float(v) for v in lines[0].split()]
    assert len(losses) == 3 and losses[-1] < losses[0]
    for task in ("worker 0", "worker 1", "ps 0", "ps 1"):
        assert "Loss per epoch" not in result.outputs[task]          # only the coordinator runs the program
    assert (tmp_path / "log").is_dir()                               # TensorBoard
    assert (tmp_path / "ckpt").exists()                              # ModelCheckpoint
    assert not list((tmp_path / "backup").glob("*ckpt*"))             # BackupAndRestore: deleted after fit
