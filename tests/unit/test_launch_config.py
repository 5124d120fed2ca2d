"""Launcher pieces that need no processes: TF_CONFIG, environment, ports, CLI, output."""
from __future__ import annotations

import io
import json
import os
import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distrib.launch.cli import parse_args
from distrib.process.exit_codes import RESTART_EXIT_CODE, describe_returncode, signal_exit_code
from distrib.launch.layout import (ClusterLayout, TaskSpec, build_cluster, format_address,
                                   task_environment, tf_config)
from distrib.launch.output import OutputRouter, pump_lines
from distrib.process.ports import free_port, reserve_ports
from distrib.launch.result import TaskStatus


# -- layout and TF_CONFIG ----------------------------------------------------

def test_task_names_follow_the_log_prefix_convention():
    assert TaskSpec("chief", 0).name == "chief"
    assert TaskSpec("evaluator", 0).name == "evaluator"
    assert TaskSpec("worker", 1).name == "worker 1"
    assert TaskSpec("ps", 0).name == "ps 0"


def test_tasks_are_in_rank_order():
    layout = ClusterLayout(workers=2, chief=True, ps=2, evaluator=True)
    assert [t.name for t in layout.tasks()] == [
        "chief", "worker 0", "worker 1", "ps 0", "ps 1", "evaluator"]
    assert [t.name for t in layout.training_tasks()] == ["chief", "worker 0", "worker 1"]


@pytest.mark.parametrize("kwargs, field", [
    (dict(workers=-1), "workers"),
    (dict(workers=True), "workers"),
    (dict(workers=2.0), "workers"),
    (dict(ps=-2), "ps"),
    (dict(ps="1"), "ps"),
])
def test_bad_counts_are_rejected_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"{field} must be an integer >= 0"):
        ClusterLayout(**kwargs)


def test_a_cluster_needs_a_trainer():
    with pytest.raises(ValueError, match="at least one worker or a chief"):
        ClusterLayout(workers=0, ps=1)
    assert [t.name for t in ClusterLayout(workers=0, chief=True).tasks()] == ["chief"]


def test_tf_config_is_exactly_tensorflows_format():
    layout = ClusterLayout(workers=2, chief=True, ps=1)
    cluster = build_cluster(layout, "127.0.0.1", [7000, 7001, 7002, 7003])
    config = json.loads(tf_config(cluster, TaskSpec("worker", 1)))
    assert config == {
        "cluster": {
            "chief": ["127.0.0.1:7000"],
            "worker": ["127.0.0.1:7001", "127.0.0.1:7002"],
            "ps": ["127.0.0.1:7003"],
        },
        "task": {"type": "worker", "index": 1},
    }


def test_jobs_without_tasks_are_left_out():
    cluster = build_cluster(ClusterLayout(workers=3), "127.0.0.1", [1, 2, 3])
    assert set(cluster) == {"worker"}
    assert set(json.loads(tf_config(cluster, TaskSpec("worker", 0)))["cluster"]) == {"worker"}


def test_evaluator_is_listed_in_the_cluster():
    cluster = build_cluster(ClusterLayout(workers=1, evaluator=True), "127.0.0.1", [1, 2])
    config = json.loads(tf_config(cluster, TaskSpec("evaluator", 0)))
    assert config["cluster"]["evaluator"] == ["127.0.0.1:2"]
    assert config["task"] == {"type": "evaluator", "index": 0}


def test_ipv6_addresses_are_bracketed():
    assert format_address("::1", 80) == "[::1]:80"
    assert format_address("10.0.0.1", 80) == "10.0.0.1:80"


def test_tf_config_rejects_a_task_outside_the_cluster():
    cluster = build_cluster(ClusterLayout(workers=2), "127.0.0.1", [1, 2])
    with pytest.raises(ValueError, match="worker 2 is not in the cluster"):
        tf_config(cluster, TaskSpec("worker", 2))
    with pytest.raises(ValueError, match="need 2 ports, got 1"):
        build_cluster(ClusterLayout(workers=2), "127.0.0.1", [1])


@settings(max_examples=60, deadline=None)
@given(workers=st.integers(0, 4), chief=st.booleans(), ps=st.integers(0, 3),
       evaluator=st.booleans())
def test_every_task_gets_a_consistent_tf_config(workers, chief, ps, evaluator):
    if workers == 0 and not chief:
        return
    layout = ClusterLayout(workers=workers, chief=chief, ps=ps, evaluator=evaluator)
    tasks = layout.tasks()
    ports = list(range(9000, 9000 + len(tasks)))
    cluster = build_cluster(layout, "127.0.0.1", ports)
    configs = [json.loads(tf_config(cluster, t)) for t in tasks]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)
    addresses = [a for job in cluster.values() for a in job]
    assert len(addresses) == len(set(addresses)) == len(tasks)
    expected_jobs = {"chief": int(chief), "worker": workers, "ps": ps, "evaluator": int(evaluator)}
    assert {job: len(v) for job, v in cluster.items()} == {j: n for j, n in expected_jobs.items() if n}
    for task, config in zip(tasks, configs):
        assert config["task"] == {"type": task.task_type, "index": task.task_index}
        assert 0 <= task.task_index < len(config["cluster"][task.task_type])


# -- environment ---------------------------------------------------------------

def _env(base, *, training=2, cpus=8, restart=0, task=TaskSpec("worker", 1)):
    cluster = build_cluster(ClusterLayout(workers=2), "127.0.0.1", [1, 2])
    return task_environment(base, cluster, task, num_training_tasks=training,
                            restart_count=restart, cpus=cpus)


def test_task_environment_sets_the_launch_variables():
    base = {"PATH": "/bin", "KEEP": "me"}
    env = _env(base, restart=3)
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}
    assert env["DISTRIB_LAUNCHED"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["DISTRIB_RESTART_COUNT"] == "3"
    assert env["DISTRIB_TASK_NAME"] == "worker 1"
    assert env["KEEP"] == "me"
    assert "TF_CONFIG" not in base  # the caller's mapping is not modified


@pytest.mark.parametrize("cpus, training, expected", [(8, 2, "4"), (8, 3, "2"), (2, 4, "1"), (1, 1, "1")])
def test_threads_are_shared_fairly_among_training_tasks(cpus, training, expected):
    assert _env({}, cpus=cpus, training=training)["OMP_NUM_THREADS"] == expected


def test_a_user_thread_count_is_kept():
    assert _env({"OMP_NUM_THREADS": "7"}, cpus=2)["OMP_NUM_THREADS"] == "7"


# -- ports -----------------------------------------------------------------------

def test_reserved_ports_are_distinct_and_bindable():
    ports = reserve_ports(8)
    assert len(set(ports)) == 8
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_ports_are_not_handed_out_twice_in_a_row():
    first, second = reserve_ports(16), reserve_ports(16)
    assert not set(first) & set(second)
    assert free_port() not in first + second


def test_reserve_ports_is_safe_across_threads():
    results = []

    def pick():
        results.append(reserve_ports(4))

    threads = [threading.Thread(target=pick) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    ports = [p for r in results for p in r]
    assert len(ports) == 16 and len(set(ports)) == 16


@pytest.mark.parametrize("span", [None, "25000-25100"])
def test_reserve_ports_rejects_a_negative_count_and_a_bad_host(monkeypatch, span):
    if span is None:
        monkeypatch.delenv("DISTRIB_PORT_RANGE", raising=False)
    else:
        monkeypatch.setenv("DISTRIB_PORT_RANGE", span)
    with pytest.raises(ValueError):
        reserve_ports(-1)
    with pytest.raises(OSError, match="cannot bind a free port on host '203.0.113.7'"):
        reserve_ports(1, "203.0.113.7")  # TEST-NET address: not on this machine


# -- CLI ---------------------------------------------------------------------------

def test_cli_defaults():
    opts = parse_args(["launch", "train.py"])
    assert (opts.target, opts.args, opts.workers, opts.chief, opts.ps, opts.evaluator,
            opts.max_restarts, opts.host, opts.module, opts.timeout) == (
        "train.py", [], 1, False, 0, False, 0, "127.0.0.1", False, None)


def test_cli_all_options():
    opts = parse_args(["launch", "--workers", "3", "--chief", "--ps", "2", "--evaluator",
                       "--max-restarts", "4", "--host", "0.0.0.0", "--grace-seconds", "1.5",
                       "--timeout", "30", "train.py", "a", "b"])
    assert (opts.workers, opts.chief, opts.ps, opts.evaluator, opts.max_restarts, opts.host,
            opts.grace_seconds, opts.timeout, opts.target, opts.args) == (
        3, True, 2, True, 4, "0.0.0.0", 1.5, 30.0, "train.py", ["a", "b"])


def test_arguments_after_the_script_belong_to_the_script():
    opts = parse_args(["launch", "--workers", "2", "train.py", "--workers", "5", "-m", "--chief"])
    assert opts.workers == 2 and not opts.chief and not opts.module
    assert opts.args == ["--workers", "5", "-m", "--chief"]


def test_module_mode():
    opts = parse_args(["launch", "--workers", "2", "-m", "pkg.train", "--lr", "0.1"])
    assert opts.module and opts.target == "pkg.train" and opts.args == ["--lr", "0.1"]


@pytest.mark.parametrize("argv", [
    ["launch"],
    ["launch", "--workers", "-1", "train.py"],
    ["launch", "--workers", "two", "train.py"],
    ["launch", "--grace-seconds", "soon", "train.py"],
    [],
    ["train.py"],
])
def test_bad_command_lines_exit_with_usage_code(argv, capsys):
    with pytest.raises(SystemExit) as info:
        parse_args(argv)
    assert info.value.code == 2
    assert "distrib" in capsys.readouterr().err


# -- exit statuses ------------------------------------------------------------------

def test_exit_status_descriptions():
    assert describe_returncode(3) == "failed with exit code 3"
    assert describe_returncode(-9) == "was killed by SIGKILL"
    assert describe_returncode(-15) == "was killed by SIGTERM"
    assert "restart code 75" in describe_returncode(RESTART_EXIT_CODE)
    assert signal_exit_code(2) == 130 and signal_exit_code(15) == 143
    assert TaskStatus("worker 0", -15, stopped=True).describe() == \
        "worker 0 was stopped by the launcher (SIGTERM)"
    assert TaskStatus("ps 0", None).describe() == "ps 0 did not start"
    assert TaskStatus("chief", 0).describe() == "chief finished successfully"


# -- output -------------------------------------------------------------------------

def test_lines_are_prefixed_and_carriage_returns_reprefixed():
    sink = io.StringIO()
    router = OutputRouter(sink)
    router.task_line("worker 1", "stdout", "epoch 1")
    router.task_line("chief", "stderr", "10%\r20%")
    router.launcher_line("distrib launch: done")
    assert sink.getvalue() == ("[worker 1] epoch 1\n[chief] 10%\r[chief] 20%\n"
                               "distrib launch: done\n")
    assert router.outputs() is None and router.combined() is None


def test_capture_keeps_per_task_and_combined_output():
    router = OutputRouter("capture")
    router.ensure_task("worker 1")
    router.task_line("worker 0", "stdout", "a")
    router.task_line("worker 0", "stderr", "b")
    router.launcher_line("distrib launch: x")
    assert router.outputs() == {"worker 1": "", "worker 0": "a\nb\n"}
    assert router.combined() == "[worker 0] a\n[worker 0] b\ndistrib launch: x\n"


def test_default_output_goes_to_stdout_and_stderr(capsys):
    router = OutputRouter(None)
    router.task_line("worker 0", "stdout", "out")
    router.task_line("worker 0", "stderr", "err")
    router.launcher_line("distrib launch: note")
    captured = capsys.readouterr()
    assert captured.out == "[worker 0] out\n"
    assert captured.err == "[worker 0] err\ndistrib launch: note\n"


def test_bad_output_mode_is_rejected():
    with pytest.raises(ValueError, match="output must be None, 'capture' or a text stream"):
        OutputRouter("stdout")


def test_pump_splits_lines_and_survives_odd_bytes():
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"one\r\ntwo\n\xff bad\nno newline at end")
    os.close(write_fd)
    router = OutputRouter("capture")
    with os.fdopen(read_fd, "rb") as pipe:
        pump_lines(pipe, "worker 0", "stdout", router)
    assert router.outputs() == {"worker 0": "one\ntwo\n\ufffd bad\nno newline at end\n"}
