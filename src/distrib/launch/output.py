"""Prefix every line a task prints with the task's name, and optionally keep it.

Each task's stdout and stderr are read on their own threads, chunk by chunk as
the task writes them, and handed to one `OutputRouter`, which writes under one
lock so output of different tasks never mixes inside a line.

Two ways to show it:

* **Line mode** (a pipe, a file, a text stream, ``"capture"``): a line is
  written whole once it ends, as ``[worker 1] text``; a carriage return
  inside a line is followed by the prefix again so a terminal replaying the
  log still shows whose line it is.
* **Live mode** (the launcher's stdout is a terminal): an unfinished line —
  a progress bar redrawn with ``\\r`` — is shown at once and redrawn in place
  on every update (``\\r[chief] 12/60 ━━━...``). When another task's line, or
  the launcher's own message, arrives while such a bar is on screen, the bar's
  row is cleared, the line printed above it, and the bar drawn again below, so
  the bar is never interleaved with other text.

Where lines go (`OutputRouter`'s ``output``):

* ``None``: task stdout to the launcher's stdout, task stderr and the
  launcher's own messages to the launcher's stderr;
* ``"capture"``: kept in memory only (`outputs`, `combined`);
* a text stream: every line to that stream.

Whose standard output is written (``stdout_from``: the task names
`distrib.launch.output_select.OutputSelection` chose; ``None``: every task's)
applies to the terminal or stream only: every task's standard error is
written, captured output keeps everything, and ``logs``
(`distrib.launch.output_logs.TaskLogs`) get every line of every task. In live
mode long lines are folded at the terminal's width (between words, each row prefixed).

Example:
    >>> import io
    >>> sink = io.StringIO()
    >>> router = OutputRouter(sink)
    >>> router.task_text("worker 1", "stdout", "step 3\\rst")
    >>> router.task_text("worker 1", "stdout", "ep 4\\n")
    >>> sink.getvalue()
    '[worker 1] step 3\\r[worker 1] step 4\\n'
"""
from __future__ import annotations

import codecs
import os
import re
import shutil
import sys
import textwrap
import threading
from typing import IO, Dict, FrozenSet, List, Optional, TextIO, Tuple, Union

from distrib.launch.output_logs import TaskLogs

__all__ = ["OutputRouter", "pump_lines", "OutputMode", "wrap_to_width"]

OutputMode = Union[None, str, TextIO]

_MAX_LINE_CHARS = 1 << 16
_READ_BYTES = 1 << 16
_CLEAR_ROW = "\r\x1b[K"
_MIN_TASK_COLUMNS = 20
_CONTINUATION = "    "


def wrap_to_width(text: str, width: int) -> str:
    """A long launcher line in rows of at most ``width`` columns, continuation rows indented.

    Breaks after a comma first (``worker 1 (127.0.0.1:5001), worker 2 ...`` keeps each task whole),
    then at spaces; a word longer than a row stays whole.

    Example:
        >>> print(wrap_to_width("starting worker 0 (h:1), worker 1 (h:2), worker 2 (h:3)", 30))
        starting worker 0 (h:1),
            worker 1 (h:2),
            worker 2 (h:3)
    """
    rows: List[str] = []
    row = ""
    for piece in re.split(r"(?<=, )", text):
        if row.strip() and len((row + piece).rstrip()) > width:
            rows.append(row.rstrip())
            row = _CONTINUATION + piece
        else:
            row += piece
    rows.append(row.rstrip())
    fitted: List[str] = []
    for line in rows:
        fitted += textwrap.wrap(line, width, subsequent_indent=_CONTINUATION, break_long_words=False,
                                break_on_hyphens=False) if len(line) > width else [line]
    return "\n".join(fitted)


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return False


def _visible(text: str) -> str:
    """What a terminal shows of a line redrawn with ``\\r``: its last non-empty segment."""
    for segment in reversed(text.split("\r")):
        if segment:
            return segment
    return ""


class OutputRouter:
    """Writes prefixed task output and launcher messages; captures them when asked.

    Args:
        output: ``None``, ``"capture"`` or a text stream (see the module docstring).
        stdout_from: the tasks whose standard output is written (``None``: all).
        logs: where every task's lines are also appended, if anywhere.
    """

    def __init__(self, output: OutputMode = None, stdout_from: Optional[FrozenSet[str]] = None,
                 logs: Optional[TaskLogs] = None) -> None:
        if isinstance(output, str) and output != "capture":
            raise ValueError(f"distrib launch: output must be None, 'capture' or a text stream, "
                             f"got {output!r}")
        self._capture = output == "capture"
        self._stream = None if (output is None or self._capture) else output
        self._lock = threading.Lock()
        self._broken = False
        self._per_task: Dict[str, List[str]] = {}
        self._combined: List[str] = []
        self._partial: Dict[Tuple[str, str], str] = {}
        self._open: Optional[Tuple[str, str]] = None
        self._last_error: Dict[str, str] = {}
        self._stdout_from = stdout_from
        self._logs = logs
        self._log_failure_said = False
        self._bars: set = set()  # (task, stream) whose unfinished line is redrawn with \r: a progress bar
        self.live = not self._capture and _isatty(self._destination("stdout"))

    @property
    def capturing(self) -> bool:
        return self._capture

    def task_columns(self, name: str) -> Optional[int]:
        """Columns left for task ``name``'s live lines after its ``[name] `` prefix (live mode only).

        A task's stdout is a pipe, so it cannot ask the terminal; the launcher
        passes this down as the task's ``COLUMNS`` so a progress bar fits.
        """
        columns = self._terminal_columns()
        if columns is None:
            return None
        return max(columns - len(f"[{name}] "), _MIN_TASK_COLUMNS)

    def _terminal_columns(self) -> Optional[int]:
        if not self.live:
            return None
        try:
            columns = os.get_terminal_size(self._destination("stdout").fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = shutil.get_terminal_size().columns
        return columns if columns > 0 else None

    def task_text(self, name: str, stream: str, text: str) -> None:
        """Take any piece of what task ``name`` wrote to ``stream`` (lines or part of one)."""
        key = (name, stream)
        with self._lock:
            lines = (self._partial.pop(key, "") + text).split("\n")
            rest = lines.pop()
            for line in lines:
                self._line(key, line[:-1] if line.endswith("\r") else line)
            if len(rest) > _MAX_LINE_CHARS:
                self._line(key, rest)
                rest = ""
            if self.live and "\r" in rest[:-1]:
                rest = rest[rest.rfind("\r", 0, len(rest) - 1) + 1:]
                self._bars.add(key)  # redrawn in place: a progress bar
            if rest:
                self._partial[key] = rest
                if self.live and _visible(rest) and self._shown(key):
                    self._draw_open(key)

    def task_end(self, name: str, stream: str) -> None:
        """The task closed ``stream``: an unfinished last line is written as a line.

        In live mode a progress bar the task left unfinished (it died, or was stopped) is
        cleared from the screen instead of kept under what followed; the log files keep it.
        """
        key = (name, stream)
        with self._lock:
            rest = self._partial.pop(key, "")
            if rest and self.live and key in self._bars:
                self._bars.discard(key)
                if self._logs is not None:
                    self._logs.task_line(name, rest)
                if self._open == key:
                    self._open = None
                    self._write(_CLEAR_ROW, self._destination(stream))
            elif rest:
                self._line(key, rest)

    def task_line(self, name: str, stream: str, text: str) -> None:
        """Emit one whole line (without its newline) that task ``name`` wrote to ``stream``."""
        with self._lock:
            self._line((name, stream), text)

    def launcher_line(self, text: str) -> None:
        """Emit one of the launcher's own messages (``distrib launch: ...``)."""
        with self._lock:
            self._launcher_line(text)

    def _launcher_line(self, text: str) -> None:
        if self._logs is not None:
            self._logs.launcher_line(text)
        if self._capture:
            self._combined.append(text + "\n")
            return
        columns = self._terminal_columns()
        if columns is not None and len(text) > columns:  # wrap between items, not mid-word as the terminal would
            text = wrap_to_width(text, columns)
        self._write_above(text + "\n", self._destination("stderr"))

    def last_error_line(self, name: str) -> Optional[str]:
        """The last non-blank line task ``name`` wrote to stderr (its one-line cause), if any."""
        with self._lock:
            return self._last_error.get(name)

    def forget_errors(self) -> None:
        """Drop the remembered stderr lines (a new attempt starts)."""
        with self._lock:
            self._last_error.clear()

    def close(self) -> None:
        """Close the log files, if any (the launch is over)."""
        if self._logs is not None:
            self._logs.close()

    def ensure_task(self, name: str) -> None:
        """Record ``name`` so that `outputs` lists it even if it prints nothing."""
        with self._lock:
            self._per_task.setdefault(name, [])

    def outputs(self) -> Optional[Dict[str, str]]:
        """Per-task text (no prefixes), all attempts, or ``None`` when not capturing."""
        if not self._capture:
            return None
        with self._lock:
            return {name: "".join(lines) for name, lines in self._per_task.items()}

    def combined(self) -> Optional[str]:
        """Every prefixed line and launcher message in arrival order, or ``None``."""
        if not self._capture:
            return None
        with self._lock:
            return "".join(self._combined)

    # -- internals (called with the lock held) -------------------------------

    def _destination(self, stream: str) -> TextIO:
        if self._stream is not None:
            return self._stream
        return sys.stdout if stream == "stdout" else sys.stderr

    def _shown(self, key: Tuple[str, str]) -> bool:
        return key[1] != "stdout" or self._stdout_from is None or key[0] in self._stdout_from

    def _line(self, key: Tuple[str, str], text: str) -> None:
        name, stream = key
        prefix = f"[{name}] "
        if stream == "stderr" and text.strip():
            self._last_error[name] = _visible(text).strip()
        if self._logs is not None:
            self._logs.task_line(name, text)
            if self._logs.failed and not self._log_failure_said:
                self._log_failure_said = True
                self._launcher_line(f"distrib launch: {self._logs.failed}")
        if self._capture:
            self._per_task.setdefault(name, []).append(text + "\n")
            self._combined.append(prefix + text.replace("\r", "\r" + prefix) + "\n")
        elif not self._shown(key):
            return
        elif self.live:
            self._bars.discard(key)
            shown = self._fitted(prefix, _visible(text))
            if self._open == key:
                self._open = None
                self._write(_CLEAR_ROW + shown + "\n", self._destination(stream))
            else:
                self._write_above(shown + "\n", self._destination(stream))
        else:
            self._write(prefix + text.replace("\r", "\r" + prefix) + "\n", self._destination(stream))

    def _fitted(self, prefix: str, text: str) -> str:
        """A task's line folded at the terminal's width (live mode), every row with the task's prefix."""
        columns = self._terminal_columns()
        if columns is None or len(prefix) + len(text) <= columns:
            return prefix + text
        rows = wrap_to_width(text, max(columns - len(prefix), _MIN_TASK_COLUMNS)).split("\n")
        return "\n".join(prefix + row for row in rows)

    def _draw_open(self, key: Tuple[str, str]) -> None:
        self._open = key
        self._write(f"{_CLEAR_ROW}[{key[0]}] {_visible(self._partial[key])}",
                    self._destination(key[1]))

    def _write_above(self, text: str, stream: TextIO) -> None:
        """Write whole lines; in live mode above the bar on screen, which is then redrawn."""
        if not (self.live and self._open is not None):
            self._write(text, stream)
            return
        bar = self._open
        self._write(_CLEAR_ROW, self._destination(bar[1]))
        self._write(text, stream)
        if bar in self._partial:
            self._draw_open(bar)
        else:
            self._open = None

    def _write(self, text: str, stream: TextIO) -> None:
        if self._broken:
            return
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):
            # The reader closed our output (e.g. piped into `head`); keep
            # draining the tasks' pipes so they never block on a full pipe.
            self._broken = True


def pump_lines(pipe: IO[bytes], name: str, stream: str, router: OutputRouter) -> None:
    """Read ``pipe`` to its end, handing each piece to ``router`` as it arrives (own thread)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    read = getattr(pipe, "read1", pipe.read)
    with pipe:
        while True:
            raw = read(_READ_BYTES)
            if not raw:
                break
            text = decoder.decode(raw)
            if text:
                router.task_text(name, stream, text)
        tail = decoder.decode(b"", final=True)
        if tail:
            router.task_text(name, stream, tail)
    router.task_end(name, stream)
