"""`distrib launch` accepts torchrun's underscore spellings as aliases (issue 21)."""
from __future__ import annotations

import pytest

from distrib.launch.cli import DEFAULT_MASTER_PORT, build_parser, parse_args


@pytest.mark.parametrize("dash, underscore", [
    (["--nproc-per-node", "3"], ["--nproc_per_node", "3"]),
    (["--nproc-per-node=3"], ["--nproc_per_node=3"]),
    (["--hosts", "a,b", "--node-rank", "1"], ["--hosts", "a,b", "--node_rank", "1"]),
    (["--hosts", "a,b", "--master-addr", "a"], ["--hosts", "a,b", "--master_addr", "a"]),
    (["--hosts", "a,b", "--master-port", "4000"], ["--hosts", "a,b", "--master_port", "4000"]),
    (["--max-restarts", "2"], ["--max_restarts", "2"]),
    (["--hosts", "a,b", "--nnodes", "2"], ["--hosts", "a,b", "--nnodes", "2"]),
])
def test_underscore_spelling_means_the_same_as_the_dashed_one(dash, underscore):
    assert parse_args(["launch", *underscore, "t.py"]) == parse_args(["launch", *dash, "t.py"])


def test_a_torchrun_command_line_runs_as_typed():
    opts = parse_args(["launch", "--nnodes", "1", "--nproc_per_node", "2", "--node_rank", "0",
                       "--master_addr", "127.0.0.1", "--master_port", "29600", "train.py", "--lr", "1"])
    assert (opts.workers, opts.hosts, opts.node_rank, opts.master_port) == (2, ["127.0.0.1"], 0, 29600)
    assert (opts.target, opts.args) == ("train.py", ["--lr", "1"])


def test_master_port_alone_is_a_one_node_launch_on_that_port():
    opts = parse_args(["launch", "--nproc_per_node", "2", "--master_port", "29600", "t.py"])
    assert (opts.hosts, opts.master_port) == (["127.0.0.1"], 29600)
    assert parse_args(["launch", "--nproc_per_node", "2", "t.py"]).master_port == DEFAULT_MASTER_PORT


def test_the_aliases_are_listed_in_the_help():
    text = build_parser().commands["launch"].format_help()
    for alias in ("--nproc_per_node", "--node_rank", "--master_addr", "--master_port", "--max_restarts"):
        assert alias in text, alias
