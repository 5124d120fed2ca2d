"""A store namespace of its own for every attempt (restart) of a job.

The rendezvous store can outlive an attempt: under ``torchrun`` the elastic
agent hosts it and keeps it across ``--max-restarts`` restarts, so a restarted
task would read the previous attempt's join counts and gloo addresses and
fail with ``Connection refused``. Every key distrib writes therefore lives
under a prefix naming the attempt, built from the restart counters the
launchers set:

* ``TORCHELASTIC_RESTART_COUNT`` (torchrun),
* ``SLURM_RESTART_COUNT`` (SLURM requeue).

Only the counters present take part, so the tasks of one attempt (which share
them) agree on the prefix and two attempts never do. ``distrib launch``'s own
``DISTRIB_RESTART_COUNT`` is left out on purpose: on one machine every
restart gets fresh ports (so a fresh store), and with ``--hosts`` each node
counts its own restarts, so the counts of one attempt can differ between
nodes; there a restarted task recognises the previous attempt's chief by its
own join key instead (`distrib.comm.rendezvous`).

Example:
    >>> attempt_namespace({"TORCHELASTIC_RESTART_COUNT": "1"})
    'distrib/attempt/torchelastic1'
    >>> attempt_namespace({})
    'distrib/attempt/first'
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import torch.distributed as dist

__all__ = ["RESTART_COUNTERS", "attempt_namespace", "attempt_store"]

#: Launcher restart counters, with the short name each gets in the namespace.
RESTART_COUNTERS = (("TORCHELASTIC_RESTART_COUNT", "torchelastic"),
                    ("SLURM_RESTART_COUNT", "slurm"))


def attempt_namespace(environ: Optional[Mapping[str, str]] = None) -> str:
    """The store prefix of this attempt (see the module docstring).

    Raises:
        ValueError: a counter is set but is not a non-negative integer (names it).
    """
    env = os.environ if environ is None else environ
    parts = []
    for var, short in RESTART_COUNTERS:
        text = env.get(var, "").strip()
        if not text:
            continue
        if not text.isdigit():
            raise ValueError(f"{var}={text!r} is not a non-negative integer: it must count the "
                             f"restarts of this job (set by the launcher; unset it otherwise)")
        parts.append(f"{short}{int(text)}")
    return "distrib/attempt/" + ("-".join(parts) or "first")


def attempt_store(store: Any, environ: Optional[Mapping[str, str]] = None) -> Any:
    """``store`` seen through this attempt's `torch.distributed.PrefixStore`."""
    return dist.PrefixStore(attempt_namespace(environ), store)
