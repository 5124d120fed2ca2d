"""What a launch reports back: `LaunchResult`, `TaskStatus`, `LaunchTimeoutError`."""
from __future__ import annotations

from distrib.errors import DistribError

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from distrib.process.exit_codes import describe_returncode, signal_name

__all__ = ["TaskStatus", "LaunchResult", "LaunchTimeoutError"]


@dataclass(frozen=True)
class TaskStatus:
    """How one task of the last attempt ended.

    Attributes:
        name: ``chief``, ``worker 1``, ...
        returncode: as `subprocess` reports it (``-9``: killed by SIGKILL);
            ``None`` if the task never started.
        stopped: the launcher stopped the task (another task failed, the
            training tasks finished and this is a ps task, a timeout, or a
            signal to the launcher).
    """

    name: str
    returncode: Optional[int]
    stopped: bool = False

    def describe(self) -> str:
        """``'worker 1 failed with exit code 3'``, ``'ps 0 was stopped by the launcher (SIGTERM)'``."""
        if self.returncode is None:
            return f"{self.name} did not start"
        if self.stopped:
            how = signal_name(-self.returncode) if self.returncode < 0 else f"exit code {self.returncode}"
            return f"{self.name} was stopped by the launcher ({how})"
        return f"{self.name} {describe_returncode(self.returncode)}"


@dataclass
class LaunchResult:
    """The outcome of `distrib.launch.launch`.

    Attributes:
        returncode: ``0`` when every chief/worker task finished cleanly
            (a failed evaluator is reported in ``tasks`` and ``output`` but
            does not fail the launch); ``1`` when a task failed and no restart was left;
            ``128 + N`` when the launcher received signal ``N``.
        restarts: how many times the whole group was restarted (failures and
            preemptions together; tasks see it as ``DISTRIB_RESTART_COUNT``).
        preemption_restarts: the part of ``restarts`` caused by a task exiting
            with `RESTART_EXIT_CODE` (not counted against ``max_restarts``).
        replacements: tasks started again alone under ``elastic=True``
            (each counted against ``max_restarts``).
        failures: one description per failure or preemption, in order, e.g.
            ``"worker 1 failed with exit code 3"``.
        tasks: how each task of the last attempt ended, by name.
        outputs: each task's output (stdout and stderr, all attempts, without
            prefixes) when launched with ``output="capture"``, else ``None``.
        output: the combined prefixed output and launcher messages when
            captured, else ``None``.
    """

    returncode: int
    restarts: int = 0
    preemption_restarts: int = 0
    replacements: int = 0
    failures: List[str] = field(default_factory=list)
    tasks: Dict[str, TaskStatus] = field(default_factory=dict)
    outputs: Optional[Dict[str, str]] = None
    output: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class LaunchTimeoutError(DistribError, TimeoutError):
    """The launch ran past its ``timeout``; every task was stopped.

    Attributes:
        result: the `LaunchResult` so far (captured output included).
    """

    def __init__(self, message: str, result: LaunchResult) -> None:
        super().__init__(message)
        self.result = result
