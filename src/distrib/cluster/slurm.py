"""`SlurmClusterResolver`: a job started with ``srun``, one task per replica.

Read from the environment SLURM gives every task:

* ``SLURM_PROCID`` (this task, 0..n-1) and ``SLURM_NTASKS`` (n; ``SLURM_NPROCS`` on old SLURM);
* the host list ``SLURM_STEP_NODELIST``, else ``SLURM_JOB_NODELIST``, else
  ``SLURM_NODELIST``, compressed as ``node[01-03,07],gpu5``;
* tasks per node from ``SLURM_STEP_TASKS_PER_NODE`` or ``SLURM_TASKS_PER_NODE``
  (``2(x3),1``), else ``SLURM_NTASKS_PER_NODE`` (a per-node maximum), else an
  even split;
* ``SLURM_DISTRIBUTION``: ``block`` (SLURM's default) or ``cyclic`` placement of ranks on nodes.

Every task is a ``worker`` with ``task_id`` = ``SLURM_PROCID``. The k-th task on
a node listens on ``port + k``, so worker 0 (the chief, and the rendezvous)
is ``first-node:port``. ``port`` is the argument, else ``MASTER_PORT``, else
`DEFAULT_PORT` (29500, torch's usual rendezvous port).

Example:
    >>> r = SlurmClusterResolver({"SLURM_PROCID": "3", "SLURM_NTASKS": "4",
    ...                           "SLURM_JOB_NODELIST": "gpu[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"})
    >>> r.cluster_spec().job_tasks("worker")
    ['gpu1:29500', 'gpu1:29501', 'gpu2:29500', 'gpu2:29501']
    >>> r.rank, r.local_rank, r.rendezvous_address
    (3, 1, ('gpu1', 29500))
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

from distrib.cluster.address import check_host, format_address
from distrib.cluster.env import env_int
from distrib.cluster.errors import ClusterConfigError
from distrib.cluster.hostlist import expand_counts, expand_hostlist
from distrib.cluster.resolver_base import ResolvedClusterResolver
from distrib.cluster.spec import ClusterSpec

__all__ = ["SlurmClusterResolver", "DEFAULT_PORT", "slurm_num_tasks_variable"]

DEFAULT_PORT = 29500
_NODELISTS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
_TASKS_PER_NODE = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")


def slurm_num_tasks_variable(environ: Mapping[str, str]) -> str:
    """``SLURM_NTASKS``, or ``SLURM_NPROCS`` when only that one is set."""
    return "SLURM_NPROCS" if "SLURM_NTASKS" not in environ and "SLURM_NPROCS" in environ \
        else "SLURM_NTASKS"


class SlurmClusterResolver(ResolvedClusterResolver):
    """The cluster of a SLURM job step.

    Args:
        environ: where to read the variables (default ``os.environ``).
        port: first port on each node (default: ``MASTER_PORT``, else 29500).

    Raises:
        ClusterConfigError: a variable is missing or malformed; the message names it.
    """

    cluster_field = "the SLURM environment"
    _task_type = "worker"

    def __init__(self, environ: Optional[Mapping[str, str]] = None,
                 port: Optional[int] = None) -> None:
        env = os.environ if environ is None else environ
        ntasks_var = slurm_num_tasks_variable(env)
        ntasks = env_int(env, ntasks_var, minimum=1)
        self._task_id = env_int(env, "SLURM_PROCID", maximum=ntasks - 1,
                               context=f"for {ntasks_var} {ntasks}")
        nodes_var = next((v for v in _NODELISTS if v in env), None)
        if nodes_var is None:
            raise ClusterConfigError(
                "SLURM_JOB_NODELIST: not set (nor SLURM_STEP_NODELIST or SLURM_NODELIST); "
                "expected the job's host list, like 'node[01-04]'")
        self._hosts = _hosts(env[nodes_var], nodes_var)
        counts = _tasks_per_node(env, len(self._hosts), nodes_var, ntasks, ntasks_var)
        placement = _place(counts, _distribution(env))
        base = _base_port(env, port)
        if base + max(counts) - 1 > 65535:
            raise ClusterConfigError(
                f"port: {base} leaves no room for {max(counts)} tasks on one node "
                f"(ports {base}..{base + max(counts) - 1} must be <= 65535)")
        self._node, self._local_rank = placement[self._task_id]
        self._spec = ClusterSpec(
            {"worker": [format_address(self._hosts[n], base + k) for n, k in placement]},
            field=self.cluster_field)

    @property
    def hosts(self) -> list[str]:
        """The job's nodes, expanded, in SLURM's order."""
        return list(self._hosts)

    @property
    def local_rank(self) -> int:
        """This task's index among the tasks on its node."""
        return self._local_rank


def _hosts(text: str, var: str) -> list[str]:
    hosts = expand_hostlist(text, var)
    seen: set[str] = set()
    for host in hosts:
        check_host(host, var)
        if host.lower() in seen:
            raise ClusterConfigError(f"{var}: {text!r} lists node {host!r} twice")
        seen.add(host.lower())
    return hosts


def _tasks_per_node(env: Mapping[str, str], nnodes: int, nodes_var: str,
                    ntasks: int, ntasks_var: str) -> list[int]:
    for var in _TASKS_PER_NODE:
        if var in env:
            counts = expand_counts(env[var], var)
            if len(counts) != nnodes:
                raise ClusterConfigError(
                    f"{var}: {env[var]!r} gives counts for {len(counts)} nodes, but {nodes_var} "
                    f"has {nnodes}")
            if sum(counts) != ntasks:
                raise ClusterConfigError(
                    f"{var}: {env[var]!r} adds up to {sum(counts)} tasks, but {ntasks_var} is "
                    f"{ntasks}")
            return counts
    var = "SLURM_NTASKS_PER_NODE"
    if var in env:
        caps = expand_counts(env[var], var)
        if len(caps) == 1:
            caps = caps * nnodes
        if len(caps) != nnodes or sum(caps) < ntasks:
            raise ClusterConfigError(
                f"{var}: {env[var]!r} leaves no room for {ntasks_var}={ntasks} tasks on the "
                f"{nnodes} nodes of {nodes_var}")
        counts, remaining = [], ntasks
        for cap in caps:
            counts.append(min(cap, remaining))
            remaining -= counts[-1]
        return counts
    if ntasks % nnodes:
        raise ClusterConfigError(
            f"SLURM_TASKS_PER_NODE: not set, and {ntasks_var}={ntasks} tasks do not split evenly "
            f"over the {nnodes} nodes of {nodes_var}")
    return [ntasks // nnodes] * nnodes


def _distribution(env: Mapping[str, str]) -> str:
    text = env.get("SLURM_DISTRIBUTION", "block")
    kind = text.split(":")[0].split(",")[0].strip()
    if kind in ("", "*", "block"):
        return "block"
    if kind == "cyclic":
        return "cyclic"
    raise ClusterConfigError(
        f"SLURM_DISTRIBUTION: {text!r} is not supported; use block (the default) or cyclic")


def _place(counts: list[int], distribution: str) -> list[tuple[int, int]]:
    """Returns ``(node, index on node)`` for every rank."""
    if distribution == "block":
        return [(node, k) for node, count in enumerate(counts) for k in range(count)]
    placement: list[tuple[int, int]] = []
    used = [0] * len(counts)
    while len(placement) < sum(counts):
        for node, count in enumerate(counts):
            if used[node] < count:
                placement.append((node, used[node]))
                used[node] += 1
    return placement


def _base_port(env: Mapping[str, str], port: Optional[int]) -> int:
    if port is None:
        if "MASTER_PORT" in env:
            return env_int(env, "MASTER_PORT", minimum=1, maximum=65535)
        return DEFAULT_PORT
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ClusterConfigError(f"port: {port!r} is not an integer in 1..65535")
    return port
