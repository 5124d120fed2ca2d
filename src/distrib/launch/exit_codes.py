"""Moved to `distrib.process.exit_codes` (an alias kept for old imports)."""
from distrib.process.exit_codes import (EXIT_TASK_FAILED, EXIT_TIMEOUT, EXIT_USAGE,
                                        MAX_PREEMPTION_RESTARTS, RESTART_EXIT_CODE,
                                        describe_returncode, signal_exit_code, signal_name)

__all__ = ["RESTART_EXIT_CODE", "MAX_PREEMPTION_RESTARTS", "EXIT_TASK_FAILED", "EXIT_USAGE",
           "EXIT_TIMEOUT", "signal_exit_code", "signal_name", "describe_returncode"]
