"""Restart decisions of `distrib.launch.launch`: after a failed or preempted attempt, start again or give up.

A task that exits with `RESTART_EXIT_CODE` (preempted, checkpoint saved)
restarts the group without counting against ``max_restarts``, at most
`MAX_PREEMPTION_RESTARTS` times; any other failure restarts it while
``max_restarts`` allows.

Example:
    >>> result = LaunchResult(returncode=1)
    >>> _count_restart(result, preempted=False, max_restarts=2)
    'restarting all tasks (restart 1 of 2)'
    >>> _count_restart(result, preempted=True, max_restarts=2), result.restarts
    ('restarting all tasks (not counted against max restarts)', 2)
"""
from __future__ import annotations

import signal
from typing import List, Optional

from distrib.launch.layout import TaskSpec
from distrib.launch.report import LaunchReport
from distrib.launch.result import LaunchResult
from distrib.launch.supervisor import Outcome
from distrib.process.exit_codes import EXIT_TASK_FAILED, MAX_PREEMPTION_RESTARTS, describe_returncode

__all__ = ["restart_after_failure"]


def restart_after_failure(outcome: Outcome, stopped: List[TaskSpec], report: LaunchReport,
                           max_restarts: int) -> bool:
    """Record a failed or preempted attempt; True when the group starts again."""
    assert outcome.task is not None and outcome.returncode is not None
    preempted = outcome.kind == "preempted"
    failure = _describe_failure(outcome.task, outcome.returncode)
    report.result.failures.append(failure)
    cause = report.last_error(outcome.task, outcome.returncode)
    said = f"{failure} ({cause})" if cause and not preempted else failure
    restarting = _count_restart(report.result, preempted, max_restarts)
    if restarting:
        report.failed_at = outcome.at
        report.log(f"{said}; {restarting}")
        return True
    report.log(f"{said}; {_others(len(stopped))}{_giving_up(preempted, max_restarts)}")
    report.result.returncode = EXIT_TASK_FAILED
    return False


def _count_restart(result: LaunchResult, preempted: bool, max_restarts: int) -> Optional[str]:
    """Count one more restart in ``result`` and say which, or ``None`` when none is left.

    Preemptions have their own allowance (`MAX_PREEMPTION_RESTARTS`); the
    other restarts are the ones ``max_restarts`` limits.
    """
    if preempted:
        if result.preemption_restarts >= MAX_PREEMPTION_RESTARTS:
            return None
        result.preemption_restarts += 1
        result.restarts += 1
        return "restarting all tasks (not counted against max restarts)"
    counted = result.restarts - result.preemption_restarts + result.replacements  # elastic ones count too
    if counted >= max_restarts:
        return None
    result.restarts += 1
    return f"restarting all tasks (restart {counted + 1} of {max_restarts})"


def _giving_up(preempted: bool, max_restarts: int) -> str:
    if preempted:
        return f"; giving up after {MAX_PREEMPTION_RESTARTS} preemption restarts"
    if max_restarts:
        return f"; giving up after {max_restarts} restart{'s' if max_restarts != 1 else ''}"
    return ""


def _describe_failure(task: TaskSpec, returncode: int) -> str:
    failure = f"{task.name} {describe_returncode(returncode)}"
    if returncode == -signal.SIGTERM:  # the launcher's own SIGTERMs are never failures
        failure += (" from outside distrib launch (preempted? BackupAndRestore saves and "
                    "restarts on SIGTERM during fit, and exits with 0 once fit completed)")
    return failure


def _others(count: int) -> str:
    if count == 0:
        return "no other task was running"
    return "stopped the other task" if count == 1 else f"stopped the other {count} tasks"
