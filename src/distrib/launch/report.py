"""What `distrib.launch.launch` says and returns: its own prefixed lines and the `LaunchResult`.

Example:
    >>> report = LaunchReport(OutputRouter("capture"), timeout=None)
    >>> report.log("starting worker 0 (127.0.0.1:5000)")
    >>> report.finish().output
    'distrib launch: starting worker 0 (127.0.0.1:5000)\n'
"""
from __future__ import annotations

import signal
import time
from typing import List, Optional

from distrib.error_report import short_cause
from distrib.launch.layout import TaskSpec
from distrib.launch.output import OutputRouter
from distrib.launch.result import LaunchResult, LaunchTimeoutError
from distrib.launch.supervisor import Outcome
from distrib.process.exit_codes import EXIT_TASK_FAILED, signal_exit_code, signal_name

__all__ = ["LaunchReport", "PREFIX"]

PREFIX = "distrib launch: "


class LaunchReport:
    """The launcher's own lines and the `LaunchResult` they go with."""

    def __init__(self, router: OutputRouter, timeout: Optional[float]) -> None:
        self.router = router
        self.timeout = timeout
        self.result = LaunchResult(returncode=EXIT_TASK_FAILED)
        self._began = time.monotonic()
        #: When the last failed attempt was found to have failed (``time.time()``), for the restarted tasks.
        self.failed_at: Optional[float] = None

    def log(self, message: str) -> None:
        self.router.launcher_line(PREFIX + message)

    def finish(self) -> LaunchResult:
        self.result.outputs = self.router.outputs()
        self.result.output = self.router.combined()
        return self.result

    @staticmethod
    def success_line(seconds: float, restarts: int) -> str:
        """The closing line of a launch whose tasks all finished.

        Example:
            >>> LaunchReport.success_line(83.4, 1)
            'every task finished (exit code 0) after 1 min 23 s, 1 restart'
        """
        took = f"{int(seconds) // 60} min {int(seconds) % 60} s" if seconds >= 60 else f"{seconds:.1f} s"
        again = f", {restarts} restart{'s' if restarts != 1 else ''}" if restarts else ""
        return f"every task finished (exit code 0) after {took}{again}"

    def last_error(self, task: TaskSpec, returncode: int) -> Optional[str]:
        """The task's last stderr line: distrib's one-line error or the traceback's last line."""
        cause = self.router.last_error_line(task.name) if returncode > 0 else None
        return short_cause(cause, task.name) if cause else cause

    def check_time_left(self, deadline: Optional[float]) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            raise self._timed_out(f"timed out after {self.timeout:g} s before restart "
                                  f"{self.result.restarts}")

    def ended(self, outcome: Outcome, running: List[str], stopped: List[TaskSpec]) -> LaunchResult:
        """The result of an attempt that ended the launch: success, a signal or the timeout."""
        if outcome.kind == "success":
            self.result.returncode = 0
            self.log(self.success_line(time.monotonic() - self._began, self.result.restarts))
            return self.finish()
        if outcome.kind == "signal":
            return self._signalled(outcome.signum or 0, stopped)
        raise self._timed_out(f"timed out after {self.timeout:g} s; stopped "
                              f"{', '.join(running) if running else 'no running task'}")

    def _signalled(self, signum: int, stopped: List[TaskSpec]) -> LaunchResult:
        self.log(f"received {signal_name(signum)}; stopped {len(stopped)} running "
                 f"task{'s' if len(stopped) != 1 else ''}")
        self.result.returncode = signal_exit_code(signum)
        self.result.failures.append(f"launcher received {signal_name(signum)}")
        self.finish()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        return self.result

    def _timed_out(self, message: str) -> LaunchTimeoutError:
        self.log(message)
        self.result.failures.append(message)
        return LaunchTimeoutError(PREFIX + message, self.finish())
