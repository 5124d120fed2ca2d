"""Elastic training: survivors keep their state and a replacement catches up from a peer.

Opt-in: ``distrib launch --elastic`` sets ``DISTRIB_ELASTIC=1`` in every task
(set it yourself under another launcher). Then every
`MultiWorkerMirroredStrategy` task logs its collectives' results (a reduced
gradient bucket without a copy) and keeps in-memory snapshots (when the chief
asks in a step's vote, at most every `snapshot_every` steps of a
`BackupAndRestore` fit; each `CheckpointManager.save`); when a task dies, the
chief too (the launcher hosts the job's store), the others wait at the failed
collective, the launcher starts only the lost task again, and that
replacement re-executes from a survivor's snapshot with every collective
answered from the survivor's log until it stands where the survivors wait.
A job may run with any number of workers from one up (`Strategy.multi_replica`).
The final weights are those of a run that never failed. A task may also
leave a running job at an agreed step boundary (`request_leave`,
`distrib.comm.elastic.resize`): the others go on with the same global
batches, split among fewer replicas. See
``docs/elastic.md``, `distrib.comm.elastic.collective` and `distrib.comm.elastic.recovery`.

Example:
    >>> elastic_enabled({"DISTRIB_ELASTIC": "1"})
    True
    >>> elastic_enabled({})
    False
    >>> snapshot_every({"DISTRIB_ELASTIC_SNAPSHOT_EVERY": "4"})
    4
    >>> snapshot_every({})
    100
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional

from distrib.comm.elastic_abilities import ElasticAbilities
from distrib.comm.errors import DistribCommError
from distrib.process.task_env import ELASTIC_ENV
from distrib.comm.elastic.resize import leave_on_signal, leave_requested, request_leave, whole_number_env

__all__ = ["ELASTIC_ENV", "SNAPSHOT_EVERY_ENV", "DEFAULT_SNAPSHOT_EVERY", "elastic_enabled", "snapshot_every",
           "replaying_before_joining",
           "request_leave", "leave_requested", "leave_on_signal"]


def elastic_enabled(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether this task runs with elastic recovery (``DISTRIB_ELASTIC=1``)."""
    env = os.environ if environ is None else environ
    return env.get(ELASTIC_ENV, "").strip() == "1"


#: The most steps between the in-memory snapshots `BackupAndRestore` keeps under elastic training.
SNAPSHOT_EVERY_ENV = "DISTRIB_ELASTIC_SNAPSHOT_EVERY"
#: A snapshot copies the model and optimizer state and gathers every replica's generators (one
#: collective), so it is taken rarely; a replacement replays the steps since from the log, which holds
#: their results. The chief asks for one sooner when the log since the last grew large
#: (`distrib.comm.elastic.snapshot_policy`).
DEFAULT_SNAPSHOT_EVERY = 100


def snapshot_every(environ: Optional[Mapping[str, str]] = None) -> int:
    """The most steps between `BackupAndRestore`'s elastic snapshots (``DISTRIB_ELASTIC_SNAPSHOT_EVERY``, default 100).

    Every task of the job must see the same value (the launcher passes its environment to all).

    Raises:
        DistribCommError: not a whole number of at least 1.
    """
    read = whole_number_env(SNAPSHOT_EVERY_ENV, environ)
    if read is None:
        return DEFAULT_SNAPSHOT_EVERY
    value, raw = read
    if value < 1:
        raise DistribCommError(f"{SNAPSHOT_EVERY_ENV}={raw!r}: the steps between elastic snapshots must be a "
                               f"whole number of at least 1")
    return value


def replaying_before_joining(collective: Any) -> bool:
    """Whether ``collective`` (a strategy's; None is fine) is an elastic joiner's, replaying the
    steps before its admission.

    The members computed every example of those steps; what the joiner
    computes there only rebuilds its state, so metric updates skip them
    (`fit`'s and every `distrib.metrics.Metric`'s), or the examples would
    count twice. False for any other task and collective.
    """
    return isinstance(collective, ElasticAbilities) and collective.replaying_before_it_joined()
