"""Leaving a running job at an agreed step boundary: the job shrinks, the global batch stays.

A task asks to leave with `request_leave` (from anywhere, a signal handler
included: it only sets a flag; `leave_on_signal` installs such a handler,
e.g. for a preemption notice). The flag is never acted on where it is read:
at the end of every ``strategy.run`` each elastic task contributes its own
flag to one small all-reduce (`membership_votes`), so every task learns the same
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

    >>> next_members([0, 1, 2], leave=[1], join=[])
    [0, 2]

Joining (growing) goes the other way: a task started with
``DISTRIB_ELASTIC_GROW=1`` posts a request in the job's store and waits; the
chief admits waiting joiners in a step's vote (a joiner's entry is -1), so
every member learns the same joiners after the same step; before the next
step the members and the joiners build the next generation's groups (ranks
in task order) and the chief sends the joiner its newest snapshot and log,
from which it catches up as a replacement does
(`distrib.comm.elastic.oplog`). Then every global batch is split among more
replicas.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch

from distrib import hooks
from distrib.comm.errors import DistribCommError, first_line
from distrib.process.task_env import GROW_ENV, START_ENV

__all__ = ["request_leave", "leave_requested", "leave_on_signal", "Vote", "membership_votes", "vote_entries",
           "read_vote", "next_members", "changes_to_make",
           "post_join_request", "waiting_joiners", "admit", "wait_for_admission", "starting_tasks", "whole_number_env",
           "GROW_ENV",
           "START_ENV"]


_LEAVE = threading.Event()


def starting_tasks(cluster_size: int, environ: Optional[Dict[str, str]] = None) -> Optional[int]:
    """How many tasks start the job (``START_ENV``), or None when all ``cluster_size`` of them do.

    One is enough: an elastic job takes the multi-replica path from one worker on
    (`distrib.strategies.interface.Strategy.multi_replica`), so a worker that joins replays its steps.

    Example (``distrib launch --workers 1:4``: workers 1 to 3 join the running job):
        >>> starting_tasks(4, {"DISTRIB_ELASTIC_START_WORKERS": "1"})
        1
        >>> starting_tasks(4, {}) is None
        True

    Raises:
        DistribCommError: not a whole number from 1 to ``cluster_size``.
    """
    read = whole_number_env(START_ENV, environ)
    if read is None:
        return None
    count, raw = read
    if not 1 <= count <= cluster_size:
        raise DistribCommError(f"{START_ENV}={raw!r}: the number of workers that start an elastic job must be "
                               f"a whole number from 1 to the cluster's {cluster_size} workers")
    return None if count == cluster_size else count


def whole_number_env(name: str, environ: Optional[Dict[str, str]] = None) -> Optional[Tuple[int, str]]:
    """``(value, raw text)`` of environment variable ``name``; value 0 if it is not a whole number; None if unset.

    Example:
        >>> whole_number_env("N", {"N": " 4 "}), whole_number_env("N", {"N": "x"}), whole_number_env("N", {})
        ((4, '4'), (0, 'x'), None)
    """
    env = os.environ if environ is None else environ
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw), raw
    except ValueError:
        return 0, raw


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


class Vote(NamedTuple):
    """What every rank learns at a step's end: who leaves, who joins, whether to keep a snapshot now."""

    leave: List[int]
    join: List[int]
    snapshot: bool


def membership_votes(all_reduce: Callable[[torch.Tensor], torch.Tensor], task: int, tasks: int,
                     wants: Optional[bool] = None, admit: Sequence[int] = (), snapshot: bool = False) -> Vote:
    """The `Vote` after this step, the same on every rank (one all-reduce of `vote_entries`).

    One entry per task of the cluster (``tasks``, its size at the start, the
    most workers it can have): a task that wants to leave adds 1 at its own
    entry (the chief, ``task`` 0, never does); the chief adds -1 at each
    task it admits (``admit``: joiners waiting in the store). A last entry
    carries the chief's ``snapshot`` wish (it holds no snapshot since the
    job changed size, a joiner waits, or it is time for one), which
    `BackupAndRestore` follows on every rank: a replica that replays this
    step reads the same answer from the log.
    """
    return read_vote(all_reduce(vote_entries(task, tasks, wants, admit, snapshot)).tolist(), tasks)


def vote_entries(task: int, tasks: int, wants: Optional[bool] = None, admit: Sequence[int] = (),
                 snapshot: bool = False) -> torch.Tensor:
    """This rank's ``tasks + 1`` entries of the vote (see `membership_votes`)."""
    flags = torch.zeros(tasks + 1, dtype=torch.float64)
    if (leave_requested() if wants is None else wants) and task != 0:
        flags[task] = 1.0
    for t in admit:
        flags[t] = -1.0
    if snapshot and task == 0:
        flags[tasks] = 1.0
    return flags


def read_vote(summed: Sequence[float], tasks: int) -> Vote:
    """The `Vote` the summed entries of every rank say.

    Example (3 tasks; worker 2 asks to leave, the chief admits worker 1 and wants a snapshot):
        >>> read_vote([0.0, -1.0, 1.0, 1.0], 3)
        Vote(leave=[2], join=[1], snapshot=True)
    """
    votes = list(summed[:tasks])
    return Vote([t for t, v in enumerate(votes) if v > 0], [t for t, v in enumerate(votes) if v < 0],
                summed[tasks] > 0)


def next_members(members: Sequence[int], leave: Sequence[int], join: Sequence[int]) -> List[int]:
    """The tasks of the next generation in rank order: new rank ``i`` is task ``next_members(...)[i]``.

    Example:
        >>> next_members([0, 1, 2], leave=[1], join=[])
        [0, 2]
        >>> next_members([0, 2], leave=[], join=[1])
        [0, 1, 2]
    """
    return sorted((set(members) - set(leave)) | set(join))


def changes_to_make(members: Sequence[int], leave: Sequence[int], join: Sequence[int]) -> Tuple[List[int], List[int]]:
    """What of a vote's ``(leave, join)`` is not in effect yet for a task whose members are ``members``.

    A joiner restores a snapshot older than the step that admitted it and
    replays that step from the chief's log, its vote included: for the
    joiner, already a member of the new generation, that vote is done.

    Example (worker 1 rejoins; the joiner already has tasks [0, 1, 2]):
        >>> changes_to_make([0, 2], leave=[], join=[1])
        ([], [1])
        >>> changes_to_make([0, 1, 2], leave=[], join=[1])
        ([], [])
    """
    return [t for t in leave if t in members], [t for t in join if t not in members]


# -------------------------------------------------------- joins (the store)
# A joiner posts ``grow/request/<task>/<n>`` (n: its request number for that
# task, from ``grow/count/<task>``); the chief admits it in a step's vote and
# answers ``grow/admit/<task>/<n>`` = {"gen": ..., "tasks": [...]}.

def _es(store: Any) -> Any:
    return torch.distributed.PrefixStore("distrib/elastic", store)


def post_join_request(store: Any, task: int) -> int:
    """A joiner asks to join; returns its request number."""
    es = _es(store)
    n = int(es.add(f"grow/count/{task}", 1))
    es.set(f"grow/request/{task}/{n}", "1")
    return n


def waiting_joiners(store: Any, absent: Sequence[int]) -> List[int]:
    """The absent tasks whose newest join request is not admitted yet (the chief asks, at a step's end).

    Read from the store alone, so a chief that was replaced (and knows nothing of the requests its
    predecessor admitted) reaches the same answer.
    """
    es = _es(store)
    waiting = []
    for t in absent:
        n = int(es.add(f"grow/count/{t}", 0))
        if n and es.check([f"grow/request/{t}/{n}"]) and not es.check([f"grow/admit/{t}/{n}"]):
            waiting.append(t)
    return waiting


def admit(store: Any, task: int, gen: int, members: Sequence[int]) -> None:
    """The chief tells joiner ``task`` (its newest request) which generation it joins and its members."""
    es = _es(store)
    n = int(es.add(f"grow/count/{task}", 0))
    es.set(f"grow/admit/{task}/{n}", json.dumps({"gen": int(gen), "tasks": [int(t) for t in members]}))


def wait_for_admission(store: Any, task: int, number: int, deadline: float,
                       who: str) -> Optional[Tuple[int, List[int]]]:
    """A joiner waits until the chief admits it at a step boundary: ``(generation, members)``.

    None when the job ended first (the chief marked itself done): the joiner
    marks itself done too, so the chief, which waits for it, can close the store.
    """
    es = _es(store)
    key = f"grow/admit/{task}/{number}"
    while True:
        try:
            if es.check([key]):
                value = json.loads(es.get(key).decode())
                return int(value["gen"]), [int(t) for t in value["tasks"]]
            if store.check(["distrib/done/0"]):
                store.set(f"distrib/done/{task}", "1")
                return None
        except Exception as exc:
            raise DistribCommError(f"elastic join: {who} lost the job's store before it was admitted (the job "
                                   f"ended or its chief was lost): {first_line(exc)}") from None
        if time.monotonic() >= deadline:
            raise DistribCommError(f"elastic join: {who} was not admitted to the running job in time (the job "
                                   f"admits at a step's end, once it holds a snapshot)")
        time.sleep(0.05)  # poll: the store has no wait primitive for a key another task sets
