"""``distrib env``, ``distrib --version``, and help that fits 80 columns on any terminal."""
from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import platform
import subprocess
import sys

import pytest
import torch

import distrib
from distrib.launch.cli import main
from distrib.launch.help_format import fill_help_text

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMANDS = ([], ["launch"], ["plot"], ["env"])


def run_distrib(*args: str, env=None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in ("TF_CONFIG", "RANK", "WORLD_SIZE", "MASTER_ADDR", "LOCAL_RANK") and not k.startswith("SLURM_")
            and not k.startswith("DISTRIB_")}
    base["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run([sys.executable, "-m", "distrib", *args], capture_output=True, text=True, timeout=120,
                          env={**base, **(env or {})})


@pytest.mark.parametrize("columns", ["200", "80", "60"])
@pytest.mark.parametrize("command", COMMANDS, ids=["distrib", "launch", "plot", "env"])
def test_help_fits_80_columns_whatever_the_terminal(command, columns, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", columns)
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    widest = max(lines, key=len)
    assert len(widest) <= 80, widest
    if columns == "60":  # a narrower terminal gets its own width, example commands excepted
        assert [l for l in lines if len(l) > 60 and "distrib launch --" not in l] == []


def test_filling_keeps_example_commands_whole_and_fills_paragraphs():
    text = ("Start one process per task on this host, each with its own TF_CONFIG.\n\nexamples:\n"
            "  distrib launch --workers 2 train.py --epochs 3\n      two local workers, each with its own TF_CONFIG\n")
    assert fill_help_text(text, 40).splitlines() == [
        "Start one process per task on this host,", "each with its own TF_CONFIG.", "", "examples:",
        "  distrib launch --workers 2 train.py", "  --epochs 3", "      two local workers, each with its",
        "      own TF_CONFIG"]


def test_version_names_distrib_torch_and_python_without_importing_torch():
    proc = run_distrib("--version")
    assert proc.returncode == 0, proc.stderr
    installed = importlib.metadata.version("torch")  # the wheel's version: 2.3.1 where torch says 2.3.1+cu121
    assert torch.__version__.startswith(installed)
    assert proc.stdout.strip() == (f"distrib {distrib.__version__} (torch {installed}, "
                                   f"Python {platform.python_version()})")
    probe = ("import sys\nfrom distrib.launch.cli import main\ntry:\n    main(['--version'])\n"
             "except SystemExit:\n    pass\nprint('torch' in sys.modules)\n")
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert imported.stdout.splitlines()[-1] == "False", imported.stderr


def _rows(text: str) -> dict:
    """``label -> value`` of the report, a value wrapped onto indented rows joined again."""
    rows: dict = {}
    label = None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            label, value = line.split(":", 1)
            rows[label] = value.strip()
        elif line.startswith(" " * 14) and label is not None:
            rows[label] += " " + line.strip()
    return rows


def test_env_reports_versions_device_backend_cluster_and_the_secrets_source_never_the_secret():
    config = {"cluster": {"worker": ["h0:2222", "h1:2222"]}, "task": {"type": "worker", "index": 1}}
    secret = "do-not-print-me-0123456789"
    proc = run_distrib("env", env={"TF_CONFIG": json.dumps(config), "DISTRIB_JOB_SECRET": secret,
                                   "DISTRIB_S3_ACCESS_KEY": "also-hidden", "DISTRIB_VERBOSE": "1"})
    assert proc.returncode == 0, proc.stderr
    rows = _rows(proc.stdout)
    assert rows["distrib"].startswith(f"{distrib.__version__} (")
    assert rows["Python"].startswith(platform.python_version())
    assert rows["torch"].startswith(f"{torch.__version__} (CUDA build: ")
    assert rows["devices"] == "CPU only: torch sees no CUDA device"  # conftest hides any GPU from the tests
    assert rows["this process"] == "trains on cpu, torch.distributed backend gloo"
    assert rows["cluster"] == "TF_CONFIG: worker 1 of 2 tasks (worker: 2)"
    assert rows["job secret"] == f"DISTRIB_JOB_SECRET ({len(secret)} bytes; not shown)"
    assert "numpy " in rows["packages"] and "safetensors " in rows["packages"]
    assert secret not in proc.stdout and "also-hidden" not in proc.stdout
    assert "DISTRIB_S3_ACCESS_KEY=(set; not shown)" in proc.stdout
    assert "DISTRIB_VERBOSE=1" in proc.stdout and '"index": 1' in proc.stdout


def test_env_says_why_a_cluster_or_a_secret_is_refused_and_still_succeeds(tmp_path):
    proc = run_distrib("env", env={"TF_CONFIG": '{"cluster": ', "DISTRIB_JOB_SECRET_FILE": str(tmp_path / "none")})
    assert proc.returncode == 0, proc.stderr
    rows = _rows(proc.stdout)
    assert rows["cluster"].startswith("refused: ClusterConfigError: TF_CONFIG: not valid JSON")
    assert rows["job secret"].startswith(f"refused: DISTRIB_JOB_SECRET_FILE={tmp_path / 'none'}: cannot read")


def test_env_reads_torchrun_variables_and_a_secret_file(tmp_path):
    (tmp_path / "secret").write_text("s3cret\n")
    proc = run_distrib("env", env={"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
                                   "LOCAL_RANK": "1", "DISTRIB_JOB_SECRET_FILE": str(tmp_path / "secret")})
    rows = _rows(proc.stdout)
    assert rows["cluster"] == "torchrun's variables: worker 1 of 4 tasks (worker: 4)"
    assert rows["job secret"] == f"the file DISTRIB_JOB_SECRET_FILE={tmp_path / 'secret'} (6 bytes; not shown)"
    assert "s3cret" not in proc.stdout


def test_env_alone_says_the_process_runs_alone():
    rows = _rows(run_distrib("env").stdout)
    assert rows["cluster"].startswith("none: no TF_CONFIG, torchrun or SLURM variables")
    assert rows["job secret"].startswith("none set: distrib launch makes one per job")
