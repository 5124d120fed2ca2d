"""Live mode (the launcher's output is a terminal): long task lines folded at its width, and a progress
bar its task left unfinished cleared rather than kept (issue 50). The real launch: distributed
test_restart_at_80_columns.py."""
from __future__ import annotations

import io
import re

from distrib.launch.output import OutputRouter


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise io.UnsupportedOperation("no file descriptor")  # the width then comes from COLUMNS


def screen(text: str) -> list:
    rows, row = [], ""
    for token in re.findall(r"\r\x1b\[K|\r|\n|[^\r\n]+", text):
        if token == "\n":
            rows.append(row)
            row = ""
        elif token in ("\r", "\r\x1b[K"):
            row = ""
        else:
            row += token
    return rows + ([row] if row else [])


LOST = ("distrib: worker 0: WorkerLostError: worker 1 (127.0.0.1:44607) is gone: agree on worker 0 "
        "(127.0.0.1:40557) failed (Read error [127.0.0.1]:12472: Connection reset by peer)")


def test_a_long_task_line_is_folded_between_words_with_the_prefix_on_every_row(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    term = Terminal()
    router = OutputRouter(term)
    router.task_text("worker 0", "stderr", LOST + "\n")
    rows = screen(term.getvalue())
    assert len(rows) > 1 and all(len(row) <= 80 and row.startswith("[worker 0] ") for row in rows), rows
    assert " ".join(row[len("[worker 0] "):].strip() for row in rows) == LOST
    assert router.last_error_line("worker 0") == LOST  # the summary still gets the whole line


def test_a_short_line_and_a_pipe_are_left_alone(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    term = Terminal()
    OutputRouter(term).task_text("worker 0", "stdout", "short\n")
    assert term.getvalue() == "[worker 0] short\n"
    pipe = io.StringIO()
    OutputRouter(pipe).task_text("worker 0", "stderr", LOST + "\n")
    assert pipe.getvalue() == f"[worker 0] {LOST}\n"


def test_an_unfinished_bar_of_a_task_that_ended_is_cleared(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    term = Terminal()
    router = OutputRouter(term)
    router.task_text("worker 0", "stdout", "\r13/16 ━━━━━━━━━━━━━━━━──── 1s 490ms/step - loss: 9.1327")
    router.task_text("worker 0", "stderr", "distrib: worker 0: WorkerLostError: worker 1 is gone\n")
    router.task_end("worker 0", "stdout")
    router.task_end("worker 0", "stderr")
    assert screen(term.getvalue()) == ["[worker 0] distrib: worker 0: WorkerLostError: worker 1 is gone"]


def test_a_last_line_without_a_newline_that_was_never_redrawn_is_kept(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    term = Terminal()
    router = OutputRouter(term)
    router.task_text("worker 0", "stderr", "no newline at the end")  # shown at once, never redrawn
    router.task_end("worker 0", "stderr")
    assert screen(term.getvalue())[-1] == "[worker 0] no newline at the end"
