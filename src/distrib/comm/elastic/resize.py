"""Leaving a running job at an agreed step boundary: the job shrinks, the global batch stays.

A task asks to leave with `request_leave` (from anywhere, a signal handler
included: it only sets a flag; `leave_on_signal` installs such a handler,
e.g. for a preemption notice). The flag is never acted on where it is read:
at the end of every ``strategy.run`` each elastic task contributes its own
flag to one small all-reduce (`leave_votes`), so every task learns the same
set of leavers after the same step. Then the leavers exit with status 0 and
the others rebuild their process groups among themselves
(`distrib.comm.elastic.collective`), renumbered densely in their old order.

Nothing about the data changes but each replica's share: every worker reads
the same global batches (DATA sharding), and from the next step each of the
``M`` remaining replicas takes its slice of the same global batch
(`distrib.data.batch_split.split_bounds` over ``M``). Losses are divided by
the global batch size and gradients summed, so the update is the one the
fixed-size job makes (to float summation order).

Example (3 workers, global batch 6; worker 1 calls ``request_leave()`` in step 4)::

    end of step 4: votes [0, 1, 0] -> worker 1 exits 0; workers 0 and 2 become replicas 0 and 1
    step 5 on: replica 0 takes rows 0..2 of each global batch, replica 1 rows 3..5

    >>> survivors([False, True, False])
    [0, 2]
"""
from __future__ import annotations

import signal
import threading
from typing import Any, Callable, List, Optional, Sequence

import torch

from distrib import hooks

__all__ = ["request_leave", "leave_requested", "leave_on_signal", "leave_votes", "survivors"]

_LEAVE = threading.Event()


def request_leave() -> None:
    """Ask this task to leave the job after the current (or next) step; the others go on.

    Only sets a flag (safe in a signal handler). Every task learns the
    decision at the same step end, through a collective; this task then exits
    with status 0 from inside ``strategy.run`` (its program does not go on).
    The chief (replica 0, which hosts the job's store) cannot leave: its
    request is refused with a warning.
    """
    _LEAVE.set()


def leave_requested() -> bool:
    """Whether `request_leave` was called in this process."""
    return _LEAVE.is_set()


def leave_on_signal(signum: int = signal.SIGTERM) -> Callable[..., Any]:
    """Make ``signum`` a leave request (a preemption notice); returns the previous handler.

    Example (a task that gets SIGTERM shortly before its machine goes away):
        >>> distrib.comm.elastic.leave_on_signal(signal.SIGTERM)
    """
    return hooks.install_signal_handler(signum, lambda *_: request_leave())


def leave_votes(all_reduce: Callable[[torch.Tensor], torch.Tensor], rank: int, world: int,
                wants: Optional[bool] = None) -> List[bool]:
    """Who leaves after this step: one flag per rank, the same on every rank (one all-reduce)."""
    flags = torch.zeros(world, dtype=torch.float64)
    if (leave_requested() if wants is None else wants) and rank != 0:
        flags[rank] = 1.0
    summed = all_reduce(flags)
    return [bool(v > 0) for v in summed.tolist()]


def survivors(leaving: Sequence[bool]) -> List[int]:
    """The old ranks that stay, in order: new rank ``i`` is old rank ``survivors(...)[i]``."""
    return [r for r, gone in enumerate(leaving) if not gone]
