"""Preemption: notice SIGTERM on any worker, agree on a step, save, exit to be restarted.

A `PreemptionWatcher` installs a SIGTERM handler that only sets a flag (a
signal handler must not save or talk to other workers). At a step boundary
every worker calls `PreemptionWatcher.agreed`, so all workers learn in the
same step whether *any* of them was signalled; then all save at that same
step and exit with `RESTART_EXIT_CODE`, which `distrib launch` treats as
"restart, not a failure". The answer rides in the step's gradient all-reduce
(`distrib.comm.step_flag`), so agreeing costs no message of its own; only
where no gradient was reduced since the last check (the first check, a
step without gradients) is it one tiny all-reduce on the control group.

Once training has finished normally, SIGTERM no longer counts as a failure:
`PreemptionWatcher.uninstall` (``training_finished=True``) leaves
`exit_after_training` in place of the default handler, so a task signalled
after ``fit`` returned exits with status 0 and says so.

Further SIGTERMs only set the flag again: a task in the middle of its
preemption save must not die of the launcher's own SIGTERM to its peers. A
stuck task is ended by the launcher's SIGKILL after its grace period.

Example:
    >>> watcher = PreemptionWatcher().install()
    >>> for step in range(steps):
    ...     train_step()
    ...     if watcher.agreed(strategy):         # collective: every worker calls it every step
    ...         manager.save()
    ...         exit_for_restart()
    >>> watcher.uninstall()
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from typing import TYPE_CHECKING, Any, Optional, Union

import torch

from distrib import hooks
from distrib.comm.collective import ReduceOp
from distrib.comm.step_flag import StepFlag

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.checkpoint_role import CheckpointRole
    from distrib.strategies.interface import Strategy

from distrib.process.exit_codes import RESTART_EXIT_CODE

__all__ = ["RESTART_EXIT_CODE", "PreemptionWatcher", "exit_after_training", "exit_for_restart"]


class PreemptionWatcher:
    """Sets a flag when SIGTERM (or the given signal) arrives; agrees on it across workers.

    Args:
        signum: the signal that announces preemption.
    """

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        self.signum = signum
        self._event = threading.Event()
        self._previous: Any = None
        self._installed = False
        self._buf = torch.zeros(1)
        self._channel: Optional[StepFlag] = None  # the step flag carrying this watcher's flag

    # ------------------------------------------------------------ signal
    def install(self) -> "PreemptionWatcher":
        """Install the handler (main thread only; elsewhere warn and watch nothing)."""
        if self._installed:
            return self
        if threading.current_thread() is not threading.main_thread():
            warnings.warn("PreemptionWatcher: not in the main thread, so SIGTERM cannot be watched; "
                          "preemption will not trigger a save", RuntimeWarning, stacklevel=2)
            return self
        self._previous = hooks.install_signal_handler(self.signum, self._handle)
        self._installed = True
        return self

    def uninstall(self, training_finished: bool = False) -> None:
        """Put the previous handler back.

        Args:
            training_finished: training ended normally (not preempted). If the
                previous handler was the default one (SIGTERM kills), install
                `exit_after_training` instead: a SIGTERM that arrives once the
                work is safe ends the process with status 0 and a log line
                rather than as "killed by SIGTERM", which would fail the job.
                A handler of the user's own is always put back as it was.
        """
        if not self._installed:
            return
        previous = self._previous if self._previous is not None else signal.SIG_DFL
        if training_finished and previous in (signal.SIG_DFL, exit_after_training):
            previous = exit_after_training
        hooks.restore_signal_handler(self.signum, previous)
        self._installed = False
        if self._channel is not None:
            self._channel.remove_source(self._event.is_set)
            self._channel = None

    def _handle(self, signum: int, frame: Any) -> None:
        self._event.set()

    @property
    def installed(self) -> bool:
        return self._installed

    @property
    def received(self) -> bool:
        """True once this process was signalled (locally; see `agreed`)."""
        return self._event.is_set()

    def trigger(self) -> None:
        """Act as if the signal had arrived (for tests and for custom preemption notices)."""
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    # --------------------------------------------------------- agreement
    def agreed(self, strategy: "Union[Strategy, CheckpointRole, None]" = None) -> bool:
        """True on every worker if any worker was signalled (collective: all workers call it).

        Costs no message when a gradient all-reduce ran since the last call
        (the flag rode in it); otherwise one all-reduce of one preallocated
        float on the control group. Nothing on a single worker.
        """
        from distrib.checkpoint.strategy_lookup import resolve_role

        flag = self._event.is_set()
        collective = resolve_role(strategy, "PreemptionWatcher.agreed").collective
        if not collective.distributed:
            return flag
        channel = collective.step_flag
        if self._channel is channel:
            carried = channel.take()
            if carried is not None:
                return carried
        else:  # every worker attaches at the same call, so all fall back below
            if self._channel is not None:
                self._channel.remove_source(self._event.is_set)
            channel.add_source(self._event.is_set)
            channel.discard()  # reductions before this watcher rode along do not count
            self._channel = channel
        self._buf.fill_(1.0 if flag else 0.0)
        out = collective.control_all_reduce(self._buf, ReduceOp.MAX)
        return bool(out.item() > 0.0)


def exit_for_restart(code: Optional[int] = None) -> None:
    """Leave the process with `RESTART_EXIT_CODE` (raises SystemExit, so ``finally`` blocks run)."""
    sys.stdout.flush()
    sys.stderr.flush()
    print(f"[distrib] pid {os.getpid()}: preempted; checkpoint saved, exiting with restart code "
          f"{RESTART_EXIT_CODE if code is None else code}", file=sys.stderr, flush=True)
    raise SystemExit(RESTART_EXIT_CODE if code is None else code)


def exit_after_training(signum: int, frame: Any) -> None:
    """Signal handler for a SIGTERM after fit completed: log it and exit with status 0.

    Training is finished and its result is safe, so being stopped now is not
    a failure of the job. Raises SystemExit, so ``finally`` blocks and
    ``atexit`` hooks (leaving the job cleanly) still run.
    """
    name = signal.Signals(signum).name
    print(f"[distrib] pid {os.getpid()}: {name} after training had finished; nothing left to "
          f"save, exiting with status 0", file=sys.stderr, flush=True)
    raise SystemExit(0)
