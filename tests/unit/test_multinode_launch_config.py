"""Multi-node launch flags and the cluster every node computes on its own."""
import pytest

from distrib.launch.cli import DEFAULT_MASTER_PORT, parse_args
from distrib.launch.layout import TaskSpec, build_node_cluster, node_tasks, tf_config


def test_every_node_computes_the_same_cluster_with_ports_from_the_master_port():
    cluster = build_node_cluster(["10.0.0.1", "h2", "::1"], 2, 29500)
    assert cluster == {"worker": ["10.0.0.1:29500", "10.0.0.1:29501", "h2:29502", "h2:29503",
                                  "[::1]:29504", "[::1]:29505"]}
    assert node_tasks(1, 3, 2) == [TaskSpec("worker", 2), TaskSpec("worker", 3)]
    assert '"task": {"type": "worker", "index": 3}' in tf_config(cluster, node_tasks(1, 3, 2)[1])


def test_node_cluster_errors_name_the_flag():
    with pytest.raises(ValueError, match="--master-port 65535 leaves no room for 4 ports"):
        build_node_cluster(["a", "b"], 2, 65535)
    with pytest.raises(ValueError, match="--node-rank 2 is out of range for 2 nodes"):
        node_tasks(2, 2, 1)


def test_hosts_flags_parse_like_torchrun():
    opts = parse_args(["launch", "--hosts", "h0,h1", "--node-rank", "1", "--nproc-per-node", "2",
                       "--master-addr", "h0", "--master-port", "4000", "t.py", "--hosts", "x"])
    assert (opts.hosts, opts.node_rank, opts.workers, opts.master_port) == (["h0", "h1"], 1, 2, 4000)
    assert opts.args == ["--hosts", "x"]
    single = parse_args(["launch", "--nnodes", "1", "--master-addr", "10.1.1.1", "t.py"])
    assert (single.hosts, single.master_port) == (["10.1.1.1"], DEFAULT_MASTER_PORT)
    assert parse_args(["launch", "t.py"]).hosts is None


@pytest.mark.parametrize("argv, message", [
    (["--nnodes", "2"], "--nnodes 2 needs --hosts"),
    (["--hosts", "a,b", "--nnodes", "3"], "--nnodes 3 but --hosts lists 2 node(s)"),
    (["--hosts", "a,b", "--master-addr", "b"], "--master-addr b is not the first of --hosts (a)"),
    (["--hosts", "a,b", "--node-rank", "2"], "--node-rank 2 is out of range for 2 node(s)"),
    (["--hosts", "a,,b"], "--hosts 'a,,b' has an empty entry"),
    (["--node-rank", "1"], "--node-rank needs --hosts"),
    (["--hosts", "a", "--workers", "2", "--nproc-per-node", "3"], "--nproc-per-node 3 and --workers 2 disagree"),
    (["--master-port", "70000", "--hosts", "a"], "expected a port in 1..65535, got 70000"),
])
def test_inconsistent_multinode_flags_are_one_clear_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["launch", *argv, "t.py"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_multinode_launch_refuses_other_jobs(tmp_path):
    from distrib.launch.api import launch

    script = tmp_path / "t.py"
    script.write_text("")
    with pytest.raises(ValueError, match="runs worker tasks only; drop --chief"):
        launch(str(script), hosts=["a", "b"], chief=True)
