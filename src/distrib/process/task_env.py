"""The environment variables through which `distrib launch` tells a task how it was started.

The launcher sets them and a task's elastic machinery (`distrib.comm.elastic`)
reads them; they live here, below both, so that the launcher does not import
the training stack (and with it PyTorch) only to spell a variable's name.

Example:
    >>> env = {ELASTIC_ENV: "1", START_ENV: "2"}
    >>> sorted(env)
    ['DISTRIB_ELASTIC', 'DISTRIB_ELASTIC_START_WORKERS']
"""
from __future__ import annotations

__all__ = ["ELASTIC_ENV", "JOIN_ENV", "GROW_ENV", "START_ENV", "LEFT_DIR_ENV", "LAUNCHER_STORE_ENV", "FAILED_AT_ENV"]

#: ``1`` turns elastic recovery on in a task (``distrib launch --elastic`` sets it).
ELASTIC_ENV = "DISTRIB_ELASTIC"

#: Set (to ``1``) by ``distrib launch --elastic`` in a task it starts to replace a lost one.
JOIN_ENV = "DISTRIB_ELASTIC_JOIN"

#: Set (to ``1``) in a task that joins a running elastic job (``distrib launch --elastic`` sets it when a
#: worker that left is started again).
GROW_ENV = "DISTRIB_ELASTIC_GROW"

#: How many of the cluster's workers start an elastic job (tasks ``0..N-1``); the others join it when they
#: start. ``distrib launch --workers MIN:MAX`` (``--nnodes MIN:MAX``) sets it; unset: every task starts it.
START_ENV = "DISTRIB_ELASTIC_START_WORKERS"

#: Where ``distrib launch --elastic`` learns that a task left on purpose (``left-<pid>``) or was admitted to the
#: running job (``joined-<pid>``): an empty file by that name.
LEFT_DIR_ENV = "DISTRIB_ELASTIC_LEFT_DIR"

#: Set (to ``1``) by ``distrib launch --elastic`` on the node that runs the chief: the launcher hosts the job's
#: store at the chief's address, so the chief connects to it as every task does and the store outlives it.
LAUNCHER_STORE_ENV = "DISTRIB_LAUNCHER_STORE"

#: When the launcher found the last attempt failed (``time.time()``, set in the tasks of a restarted
#: group): `distrib.callbacks.BackupAndRestore` says how long before it the backup it resumes from was saved.
FAILED_AT_ENV = "DISTRIB_FAILED_AT"
