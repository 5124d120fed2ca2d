"""The job's store, hosted by the launcher of an elastic job, so that it outlives the chief.

Every task of a job meets in one key-value store (rendezvous, heartbeats,
the elastic generations). Without a launcher, the chief process hosts it: its
loss takes the store with it, and the job restarts from its last backup.
``distrib launch --elastic`` hosts the store itself instead, on the node that
runs the chief, at the chief's address (its ``TF_CONFIG`` port, which every
task already knows) and sets `LAUNCHER_STORE_ENV` in the tasks, so the chief
connects to it as a client like any other task. The store (an
`AuthStoreServer`: every connection proves the job secret) then lives as long
as the launcher: a lost chief is replaced in place like any worker, and the
survivors form the next generation in the store as they would for any lost
task. Each attempt (restart) gets a store of its own.

It needs the job secret (`distrib.comm.secret.cluster_secret`): a one-node
launch makes one, a multi-node one reads ``DISTRIB_JOB_SECRET``; a job
without one keeps the chief-hosted store (and whole-job restarts for a lost
chief). The launcher imports no PyTorch for it.

Example (one node, 3 workers; worker 0's address is 127.0.0.1:41234)::

    launcher: AuthStoreServer on 127.0.0.1:41234 -> tasks get DISTRIB_LAUNCHER_STORE=1
    worker 0 SIGKILLed -> the launcher starts it again alone; workers 1 and 2 wait in the store
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

from distrib.comm.secret import cluster_secret
from distrib.comm.store_server import AuthStoreServer
from distrib.launch.layout import TaskSpec
from distrib.process.task_env import LAUNCHER_STORE_ENV

__all__ = ["LauncherStore", "chief_address"]


def chief_address(cluster: Mapping[str, Sequence[str]]) -> str:
    """``host:port`` of the job's chief: the ``chief`` task if the cluster has one, else worker 0.

    Example:
        >>> chief_address({"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]})
        '10.0.0.1:2222'
    """
    if cluster.get("chief"):
        return cluster["chief"][0]
    return cluster["worker"][0]


def _runs_chief(tasks: Sequence[TaskSpec], cluster: Mapping[str, Sequence[str]]) -> bool:
    kind = "chief" if cluster.get("chief") else "worker"
    return any(t.task_type == kind and t.task_index == 0 for t in tasks)


def _split(address: str) -> "tuple[str, int]":
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class LauncherStore:
    """The store one attempt's tasks meet in, served by the launcher (see the module docstring)."""

    def __init__(self, server: AuthStoreServer, address: str) -> None:
        self._server = server
        #: Where it listens: the chief's address.
        self.address = address

    @classmethod
    def host(cls, tasks: Sequence[TaskSpec], cluster: Mapping[str, Sequence[str]],
             env: Mapping[str, str]) -> Optional["LauncherStore"]:
        """Host the store for these tasks where this launcher runs the chief and the job has a secret.

        None elsewhere: on a node without the chief, or without a secret (the chief hosts it then).

        Raises:
            OSError: the chief's port cannot be bound (another program holds it).
        """
        if not _runs_chief(tasks, cluster):
            return None
        address = chief_address(cluster)
        host, port = _split(address)
        secret = cluster_secret(host, environ=env)
        if secret is None:
            return None
        return cls(AuthStoreServer(host, port, secret), address)

    def environment(self, env: Mapping[str, str]) -> dict:
        """``env`` plus `LAUNCHER_STORE_ENV`: the chief connects to this store instead of hosting one."""
        return dict(env, **{LAUNCHER_STORE_ENV: "1"})

    def close(self) -> None:
        """Stop serving (the attempt ended)."""
        self._server.close()
