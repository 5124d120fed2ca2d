"""``--output-from``'s choices, and the router and log files that apply them (one process, no tasks)."""
from __future__ import annotations

import io
import os

import pytest

from distrib.launch.layout import ClusterLayout, TaskSpec, node_tasks
from distrib.launch.output import OutputRouter, wrap_to_width
from distrib.launch.output_logs import TaskLogs, log_file_name
from distrib.launch.output_select import OutputSelection


def names(text, tasks):
    return sorted(OutputSelection.parse(text).task_names(tasks))


def test_the_default_is_the_chief_task_else_worker_0():
    assert names(None, ClusterLayout(workers=3).tasks()) == ["worker 0"]
    assert names(None, ClusterLayout(workers=3, chief=True, ps=1).tasks()) == ["chief"]
    assert names("chief", ClusterLayout(workers=0, chief=True).tasks()) == ["chief"]


def test_lists_types_and_all_or_none():
    tasks = ClusterLayout(workers=4, chief=True, ps=2, evaluator=True).tasks()
    assert names("0,3", tasks) == ["worker 0", "worker 3"]
    assert names("worker:2, ps", tasks) == ["ps 0", "ps 1", "worker 2"]
    assert names("evaluator,chief", tasks) == ["chief", "evaluator"]
    assert names("all", tasks) == sorted(t.name for t in tasks)
    assert names("none", tasks) == []


@pytest.mark.parametrize("text", ["wroker:1", "worker:x", "-1", "", "all,0", "ps:"])
def test_a_choice_that_names_no_task_is_one_error_naming_it(text):
    with pytest.raises(ValueError, match=r"^--output-from: '.*' names no task: expected all, none, chief"):
        OutputSelection.parse(text)


def test_a_task_the_job_lacks_is_refused_with_the_tasks_it_has():
    selection = OutputSelection.parse("1,worker:5")
    with pytest.raises(ValueError, match=r"--output-from 1,worker:5 names worker 5, but this job has worker 0\.\.1"):
        selection.check(ClusterLayout(workers=2).tasks())
    with pytest.raises(ValueError, match=r"names ps 0, but this job has no ps task"):
        OutputSelection.parse("ps:0").check(ClusterLayout(workers=2).tasks())


def test_on_a_node_without_the_chief_the_default_is_the_nodes_first_worker():
    node1 = list(node_tasks(1, 2, 2))  # workers 2 and 3 of a 2-node job, 2 per node
    assert [t.name for t in node1] == ["worker 2", "worker 3"]
    assert names(None, node1) == ["worker 2"]
    assert names("0,3", node1) == ["worker 3"]  # worker 0 runs on the other node


def test_the_router_hides_unchosen_stdout_but_never_stderr_and_capture_keeps_all():
    sink = io.StringIO()
    router = OutputRouter(sink, stdout_from=frozenset({"worker 0"}))
    for name in ("worker 0", "worker 1"):
        router.task_text(name, "stdout", f"out {name}\n")
        router.task_text(name, "stderr", f"err {name}\n")
    assert sink.getvalue().splitlines() == ["[worker 0] out worker 0", "[worker 0] err worker 0",
                                            "[worker 1] err worker 1"]
    captured = OutputRouter("capture", stdout_from=frozenset({"worker 0"}))
    captured.task_text("worker 1", "stdout", "out\n")
    assert captured.outputs() == {"worker 1": "out\n"}


def test_log_files_get_every_line_and_a_write_failure_is_said_once(tmp_path):
    logs = TaskLogs(str(tmp_path / "logs"))
    router = OutputRouter(io.StringIO(), stdout_from=frozenset(), logs=logs)
    router.task_text("worker 1", "stdout", "hidden on the terminal\n")
    router.task_text("worker 1", "stderr", "shown\n")
    router.launcher_line("distrib launch: starting worker 1")
    router.close()
    lines = (tmp_path / "logs" / "worker-1.log").read_text().splitlines()
    assert lines[1:] == ["hidden on the terminal", "shown"]
    assert (tmp_path / "logs" / "launcher.log").read_text().splitlines()[1:] == ["distrib launch: starting worker 1"]
    assert log_file_name("ps 0") == "ps-0.log"

    sink = io.StringIO()
    broken = TaskLogs(str(tmp_path / "broken"))
    os.symlink("/nonexistent/dir/file", tmp_path / "broken" / "worker-0.log")  # opening it fails
    router = OutputRouter(sink, logs=broken)
    router.task_text("worker 0", "stdout", "a\nb\n")
    said = [l for l in sink.getvalue().splitlines() if l.startswith("distrib launch: cannot write")]
    assert len(said) == 1 and "worker-0.log" in said[0] and said[0].endswith("that log stops here")
    assert "[worker 0] a" in sink.getvalue() and "[worker 0] b" in sink.getvalue()  # the terminal still gets them


def test_a_log_dir_that_cannot_be_made_is_refused_before_anything_starts(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        TaskLogs(str(tmp_path / "file" / "logs"))


def test_wrapping_keeps_each_task_whole():
    line = "distrib launch: starting " + ", ".join(f"worker {i} (127.0.0.1:{20000 + i})" for i in range(8))
    rows = wrap_to_width(line, 60).splitlines()
    assert all(len(r) <= 60 for r in rows) and len(rows) == 5
    assert all(r.startswith("    worker ") for r in rows[1:])
    assert " ".join(r.strip() for r in rows) == line
    assert wrap_to_width("short", 60) == "short"
    assert TaskSpec("worker", 1).name == "worker 1"
