"""``distrib launch --log-dir DIR``: every task's whole output in a file of its own.

``DIR/worker-1.log`` receives everything ``worker 1`` writes, standard output
and standard error in the order they arrive, without the ``[worker 1]``
prefix, whatever ``--output-from`` shows on the terminal; ``DIR/launcher.log``
receives the launcher's own lines (starts, failures, restarts). Files are
appended to, never truncated: each launch first writes a line saying when it
started, so the logs of several launches (and of a task's restarts, which
``launcher.log`` lists) stay apart and nothing earlier is lost.

Example:
    >>> import tempfile, pathlib
    >>> folder = tempfile.mkdtemp()
    >>> logs = TaskLogs(folder)
    >>> logs.task_line("worker 1", "step 3")
    >>> logs.close()
    >>> pathlib.Path(folder, "worker-1.log").read_text().splitlines()[-1]
    'step 3'
"""
from __future__ import annotations

import os
import threading
import time
from typing import Dict, Optional, TextIO

__all__ = ["TaskLogs", "log_file_name"]


def log_file_name(task_name: str) -> str:
    """``worker 1`` -> ``worker-1.log``; the launcher's own lines go to ``launcher.log``."""
    return task_name.replace(" ", "-") + ".log"


class TaskLogs:
    """One append-only text file per task under ``directory`` (created if missing).

    Args:
        directory: where the files go.

    Raises:
        OSError: ``directory`` cannot be created or written (nothing was started yet).
    """

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        if not os.access(self.directory, os.W_OK):
            raise PermissionError(f"--log-dir {self.directory}: not writable")
        self._files: Dict[str, Optional[TextIO]] = {}
        self._lock = threading.Lock()
        self._started = time.strftime("%Y-%m-%d %H:%M:%S")
        self.failed: Optional[str] = None  # the first write error, for the launcher to report once

    def task_line(self, name: str, text: str) -> None:
        """Append one line task ``name`` wrote (either stream), without its newline."""
        self._write(log_file_name(name), text + "\n")

    def launcher_line(self, text: str) -> None:
        """Append one of the launcher's own lines to ``launcher.log``."""
        self._write("launcher.log", text + "\n")

    def close(self) -> None:
        with self._lock:
            for handle in self._files.values():
                if handle is not None:
                    handle.close()
            self._files.clear()

    def _write(self, file_name: str, text: str) -> None:
        with self._lock:
            if file_name not in self._files:
                self._files[file_name] = self._open(file_name)
            handle = self._files[file_name]
            if handle is None:
                return
            try:
                handle.write(text)
                handle.flush()
            except (OSError, ValueError) as exc:
                self._give_up(file_name, exc)

    def _open(self, file_name: str) -> Optional[TextIO]:
        try:
            handle = open(os.path.join(self.directory, file_name), "a", encoding="utf-8", errors="replace")
            handle.write(f"-- distrib launch started {self._started} --\n")
            return handle
        except OSError as exc:
            self._give_up(file_name, exc)
            return None

    def _give_up(self, file_name: str, exc: BaseException) -> None:
        old = self._files.get(file_name)
        if old is not None:
            try:
                old.close()
            except OSError:
                pass
        self._files[file_name] = None
        if self.failed is None:
            self.failed = f"cannot write {os.path.join(self.directory, file_name)}: {exc}; that log stops here"
