"""Exit codes shared by `distrib launch` and the tasks it runs.

A task's exit status is read the way `subprocess` reports it: ``0`` is a clean
finish, a positive number is the code the task exited with, and a negative
number ``-N`` means the task was killed by signal ``N``.

`RESTART_EXIT_CODE` is the one code with a special meaning: a task exits with
it after it has saved a checkpoint because it was preempted (it received
SIGTERM). The launcher then restarts the whole group without counting the
restart against ``--max-restarts``; the restarted tasks resume from the
checkpoint. To stop a task that keeps asking for restarts from looping
forever, at most `MAX_PREEMPTION_RESTARTS` such restarts happen in one launch.

Example:
    >>> describe_returncode(3)
    'failed with exit code 3'
    >>> describe_returncode(-9)
    'was killed by SIGKILL'
    >>> describe_returncode(RESTART_EXIT_CODE)
    'exited with restart code 75 (preempted after saving a checkpoint)'
"""
from __future__ import annotations

import signal

__all__ = [
    "RESTART_EXIT_CODE",
    "MAX_PREEMPTION_RESTARTS",
    "EXIT_TASK_FAILED",
    "EXIT_USAGE",
    "EXIT_TIMEOUT",
    "signal_exit_code",
    "signal_name",
    "describe_returncode",
]

RESTART_EXIT_CODE = 75
"""A task exits with this code after saving a checkpoint on preemption; the
launcher restarts the group without counting it as a failure (75 is
``EX_TEMPFAIL`` from BSD ``sysexits.h``: "try again later")."""

MAX_PREEMPTION_RESTARTS = 100
"""Upper bound on restarts caused by `RESTART_EXIT_CODE` within one launch."""

#: The launcher's exit code when a task failed (and no restart was left).
EXIT_TASK_FAILED = 1

#: The launcher's exit code for a malformed command line.
EXIT_USAGE = 2

#: The launcher's exit code when its ``--timeout`` ran out (as coreutils' ``timeout``).
EXIT_TIMEOUT = 124


def signal_exit_code(signum: int) -> int:
    """The shell convention for "terminated by signal": ``128 + signum`` (SIGINT -> 130)."""
    return 128 + int(signum)


def signal_name(signum: int) -> str:
    """``9`` -> ``'SIGKILL'``; an unknown number -> ``'signal 99'``."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_returncode(returncode: int) -> str:
    """A short phrase for a task's exit status, to follow the task's name."""
    if returncode == 0:
        return "finished successfully"
    if returncode < 0:
        return f"was killed by {signal_name(-returncode)}"
    if returncode == RESTART_EXIT_CODE:
        return (f"exited with restart code {RESTART_EXIT_CODE} "
                "(preempted after saving a checkpoint)")
    return f"failed with exit code {returncode}"
