"""``distrib launch --workers MIN:MAX`` / ``--nnodes MIN:MAX``: an elastic job that starts small (issue 26)."""
from __future__ import annotations

import pytest

from distrib.comm.elastic.resize import START_ENV, starting_tasks
from distrib.comm.errors import DistribCommError
from distrib.launch import launch
from distrib.launch.cli import parse_args


def test_a_range_of_workers_lists_max_and_starts_with_min():
    opts = parse_args(["launch", "--workers", "2:4", "--elastic", "t.py"])
    assert (opts.workers, opts.start_workers) == (4, 2)
    assert parse_args(["launch", "--workers", "3", "t.py"]).start_workers is None
    assert parse_args(["launch", "--workers", "3:3", "--elastic", "t.py"]).start_workers is None


def test_a_range_of_nodes_starts_with_the_first_min_nodes_workers():
    opts = parse_args(["launch", "--hosts", "a,b,c", "--nnodes", "2:3", "--nproc-per-node", "2", "--elastic",
                       "--node-rank", "2", "t.py"])
    assert (opts.workers, opts.start_workers, opts.hosts) == (2, 4, ["a", "b", "c"])


@pytest.mark.parametrize("argv, says", [
    (["--workers", "2:4"], "needs --elastic"),
    (["--workers", "4:2", "--elastic"], "1 <= MIN <= MAX"),
    (["--workers", "0:2", "--elastic"], "1 <= MIN <= MAX"),
    (["--workers", "2:x", "--elastic"], "expected an integer"),
    (["--hosts", "a,b", "--workers", "1:2", "--elastic"], "--nnodes MIN:MAX"),
    (["--hosts", "a,b", "--nnodes", "1:3", "--elastic"], "--nnodes 3 but --hosts lists 2"),
])
def test_a_bad_range_is_one_line_naming_it(capsys, argv, says):
    with pytest.raises(SystemExit) as exc:
        parse_args(["launch", *argv, "t.py"])
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_a_job_that_is_to_grow_starts_with_one_worker_at_least(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("")
    for bad in (0, 4):
        with pytest.raises(ValueError, match="must be 1 to 3"):
            launch(str(script), workers=3, elastic=True, start_workers=bad)
    with pytest.raises(ValueError, match="needs --elastic"):
        launch(str(script), workers=3, start_workers=2)
    with pytest.raises(ValueError, match="worker tasks only"):
        launch(str(script), workers=3, chief=True, elastic=True, start_workers=2)


def test_the_tasks_read_how_many_start_the_job():
    assert starting_tasks(4, {START_ENV: "2"}) == 2
    assert starting_tasks(4, {START_ENV: "1"}) == 1  # a one-worker elastic job takes the multi-replica path
    assert starting_tasks(4, {START_ENV: "4"}) is None and starting_tasks(4, {}) is None
    for bad in ("0", "5", "two"):
        with pytest.raises(DistribCommError, match=START_ENV):
            starting_tasks(4, {START_ENV: bad})
