"""`distrib.process.rerun.rerun_command`: how each start form is re-run (the processes: test_local_replica_start_forms)."""
from __future__ import annotations

import sys
import types

import pytest

from distrib.process.rerun import RerunCommand, RerunError, rerun_command

PY = "/usr/bin/python3"


def _started(monkeypatch, orig, argv, main_file=None, path0=None, notebook=False):
    monkeypatch.setattr(sys, "orig_argv", [PY, *orig])
    monkeypatch.setattr(sys, "argv", list(argv))
    main = types.ModuleType("__main__")
    if main_file is not None:
        main.__file__ = main_file
    monkeypatch.setitem(sys.modules, "__main__", main)
    if path0 is not None:
        monkeypatch.setattr(sys, "path", [path0, *sys.path[1:]])
    if notebook:
        monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    else:
        monkeypatch.delitem(sys.modules, "ipykernel", raising=False)


@pytest.mark.parametrize("typed", ["jobs/train.py", "./jobs/../jobs/train.py", "train.py"])
def test_relative_script_starts_where_the_program_started(monkeypatch, typed):
    _started(monkeypatch, ["-u", typed, "--fast"], [typed, "--fast"], main_file=f"/home/me/{typed}")
    command = rerun_command("/data")                       # the program changed to /data before importing distrib
    assert (command.args, command.cwd) == (["-u", typed, "--fast"], "/home/me")


def test_absolute_script_runs_from_the_import_directory(monkeypatch):
    _started(monkeypatch, ["/opt/train.py"], ["/opt/train.py"], main_file="/opt/train.py")
    assert rerun_command("/data") == RerunCommand(["/opt/train.py"], "/data")


def test_directory_program(monkeypatch):
    _started(monkeypatch, ["app"], ["app"], main_file="/home/me/app/__main__.py")
    command = rerun_command("/data")
    assert (command.args, command.cwd) == (["app"], "/home/me")


def test_module_starts_in_the_directory_python_put_first_on_the_path(monkeypatch, tmp_path):
    _started(monkeypatch, ["-X", "utf8", "-m", "pkg.train", "a"], [str(tmp_path / "pkg/train.py"), "a"],
             main_file=str(tmp_path / "pkg/train.py"), path0=str(tmp_path))
    command = rerun_command("/data")
    assert (command.args, command.cwd) == (["-X", "utf8", "-m", "pkg.train", "a"], str(tmp_path))


def test_code_is_rerun_from_the_import_directory(monkeypatch):
    _started(monkeypatch, ["-c", "print(1)", "x"], ["-c", "x"])
    command = rerun_command("/data")
    assert (command.args, command.cwd) == (["-c", "print(1)", "x"], "/data")


@pytest.mark.parametrize("orig, argv, words", [
    ([], [""], "interactive session or standard input"),
    (["-"], ["-"], "interactive session or standard input"),
    (["-f", "k.json"], ["/x/ipykernel_launcher.py", "-f", "k.json"], "notebook"),
])
def test_what_cannot_be_rerun_says_so_in_one_line(monkeypatch, orig, argv, words):
    _started(monkeypatch, orig, argv, notebook="notebook" in words)
    with pytest.raises(RerunError) as info:
        rerun_command("/data", why="2 local replicas need this program re-run once per device")
    message = str(info.value)
    assert "\n" not in message and words in message and message.startswith("2 local replicas")
