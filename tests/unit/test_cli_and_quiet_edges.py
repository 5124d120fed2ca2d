"""The CLI that teaches (help with examples, did-you-mean), one-line errors, and quieter edges."""
import subprocess
import sys
import warnings

import pytest
import torch

from distrib import hooks
from distrib.checkpoint import Checkpoint, CheckpointManager
from distrib.checkpoint.files.fs import StorageBackendError
from distrib.checkpoint.files.storage import CheckpointNotFoundError
from distrib.cluster import ClusterConfigError, TFConfigClusterResolver
from distrib.cluster.tf_config import EmptyTFConfigWarning
from distrib.launch.cli import main, suggest_option


def run_distrib(*args):
    return subprocess.run([sys.executable, "-m", "distrib", *args], capture_output=True, text=True,
                          timeout=120)


# -- CLI -------------------------------------------------------------------------------

def test_python_m_distrib_prints_help_with_examples():
    proc = run_distrib()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: distrib")
    assert "distrib launch --workers 2 train.py" in proc.stdout
    assert "pip install" in proc.stdout and proc.stderr == ""


def test_launch_help_has_examples_for_each_way_to_run(capsys):
    with pytest.raises(SystemExit) as info:
        main(["launch", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for example in ("distrib launch --workers 2 train.py", "--chief --workers 2 --ps 1",
                    "--max-restarts 3", "--nnodes 2 --node-rank 0", "--verbose"):
        assert example in text, example


@pytest.mark.parametrize("flag, meant", [("--num-workers", "--workers"), ("--worker", "--workers"),
                                         ("--max-restart", "--max-restarts"), ("--chef", "--chief")])
def test_a_misspelt_option_gets_a_suggestion(flag, meant, capsys):
    with pytest.raises(SystemExit) as info:
        main(["launch", flag, "2", "train.py"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: distrib launch")
    assert f"{flag}: did you mean {meant}?" in err.splitlines()[-1]
    assert "see 'distrib launch --help'" in err


def test_an_unknown_option_with_no_close_match_points_to_help(capsys):
    with pytest.raises(SystemExit):
        main(["launch", "--frobnicate", "train.py"])
    last = capsys.readouterr().err.splitlines()[-1]
    assert "unrecognized arguments: --frobnicate" in last and "did you mean" not in last
    assert suggest_option("--frobnicate", ["--workers"]) is None


# -- one-line errors (unit; the launched job is in tests/distributed/test_launcher_ux.py) ---

def test_one_line_names_task_error_and_message():
    error = ClusterConfigError("TF_CONFIG['task']: missing; give it\nsecond line")
    assert hooks.one_line(error, "worker 1") == \
        "distrib: worker 1: ClusterConfigError: TF_CONFIG['task']: missing; give it"
    assert hooks.task_label({"TF_CONFIG": '{"task": {"type": "ps", "index": 2}}'}) == "ps 2"
    assert hooks.task_label({}) == "this process"
    assert hooks.verbose({"DISTRIB_VERBOSE": "1"}) and not hooks.verbose({})


# -- malformed TF_CONFIG that used to run silently as one process ------------------

@pytest.mark.parametrize("text", ["", "{}", '{"cluster": {}}',
                                  '{"cluster": {"evaluator": ["127.0.0.1:1"]}, '
                                  '"task": {"type": "evaluator", "index": 0}}'])
def test_set_but_empty_tf_config_warns_that_it_runs_alone(text):
    with pytest.warns(EmptyTFConfigWarning, match="runs as a single process") as record:
        TFConfigClusterResolver(environ={"TF_CONFIG": text})
    assert len(record) == 1 and "\n" not in str(record[0].message)


def test_absent_tf_config_and_a_real_cluster_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TFConfigClusterResolver(environ={})
        TFConfigClusterResolver(environ={"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, '
                                                      '"task": {"type": "worker", "index": 0}}'})


# -- quiet edges -------------------------------------------------------------------------

def test_missing_fsspec_backend_is_reported_when_created(tmp_path):
    pytest.importorskip("fsspec")
    try:
        import s3fs  # noqa: F401
        pytest.skip("s3fs is installed")
    except ImportError:
        pass
    from distrib.callbacks import BackupAndRestore

    with pytest.raises(StorageBackendError, match=r"CheckpointManager: 's3://bucket/run' needs an "
                                                  r"fsspec backend .*pip install s3fs"):
        CheckpointManager(Checkpoint(model=torch.nn.Linear(2, 1)), "s3://bucket/run", max_to_keep=1)
    with pytest.raises(StorageBackendError, match=r"BackupAndRestore: 's3://bucket/b'"):
        BackupAndRestore("s3://bucket/b")
    with pytest.raises(StorageBackendError, match="unknown storage protocol 'nope'"):
        BackupAndRestore("nope://x")
    BackupAndRestore(str(tmp_path / "local"))  # local paths are fine


def test_load_model_on_a_missing_path_says_not_found(tmp_path):
    from distrib.models import load_model

    missing = tmp_path / "never_saved"
    with pytest.raises(CheckpointNotFoundError, match=r"never_saved: not found; check the path") as info:
        load_model(str(missing))
    assert "incomplete" not in str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    missing.mkdir()  # a directory without the COMPLETE marker still reads as incomplete
    with pytest.raises(Exception, match="incomplete checkpoint"):
        load_model(str(missing))


def test_an_unknown_option_of_plot_gets_the_plot_usage(capsys):
    with pytest.raises(SystemExit) as info:
        main(["plot", "logs", "--bogus"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: distrib plot") and "see 'distrib plot --help'" in err
