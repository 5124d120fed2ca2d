"""`LaunchConfig`: everything `distrib.launch.launch` is told besides the program, as one object.

The command line builds one (``distrib launch``'s parsed options are a
`LaunchConfig` with the program added, `distrib.launch.cli.LaunchOptions`),
and `launch` takes one, or its fields as keyword arguments, as before.

Example:
    >>> config = LaunchConfig(workers=2, max_restarts=1)
    >>> config.workers, config.chief, config.grace_seconds
    (2, False, 10.0)
    >>> config.replace(elastic=True).elastic
    True
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, TextIO, Union

if TYPE_CHECKING:  # pragma: no cover
    from distrib.process.fork_client import SharedForkServer

__all__ = ["LaunchConfig", "DEFAULT_GRACE_SECONDS", "DEFAULT_MASTER_PORT"]

DEFAULT_GRACE_SECONDS = 10.0
"""Seconds between SIGTERM and SIGKILL when tasks are stopped: time for a
preempted task to save its checkpoint."""

#: The first port of a multi-node cluster (the chief's), as torchrun's ``--master-port``.
DEFAULT_MASTER_PORT = 29500


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """How `distrib.launch.launch` starts and supervises the tasks.

    Attributes:
        module: run the target as a module (``python -m``).
        workers, chief, ps, evaluator: the cluster (see `distrib.launch.layout.ClusterLayout`).
        max_restarts: restarts allowed after failures; restarts requested
            with `distrib.launch.RESTART_EXIT_CODE` do not count (at most
            `distrib.launch.MAX_PREEMPTION_RESTARTS` of them).
        env: variables to add to the launcher's environment for the tasks
            (a value of ``None`` removes the variable). Unless it names a job
            secret already (``DISTRIB_JOB_SECRET`` or ``DISTRIB_JOB_SECRET_FILE``),
            the tasks get a fresh random ``DISTRIB_JOB_SECRET`` for this launch.
        cwd: the tasks' working directory (default: the current one).
        timeout: hard limit in seconds on the whole launch, restarts
            included (stopping the tasks may add up to ``grace_seconds``).
        host: address the tasks' ports are picked on and published in ``TF_CONFIG``.
        output: ``None`` (prefixed lines to this process's stdout/stderr),
            ``"capture"`` (kept in the result's ``outputs`` and ``output``)
            or a text stream (every prefixed line written to it).
        grace_seconds: time between SIGTERM and SIGKILL when stopping tasks.
        python: interpreter for the tasks (default: this one).
        verbose: set ``DISTRIB_VERBOSE=1`` in the tasks, so distrib's own
            errors print their full traceback, not just one line.
        hosts: multi-node launch: one address per node, the same list on
            every node; this node starts the ``workers`` tasks of node
            ``node_rank`` with the cluster of `distrib.launch.layout.build_node_cluster`
            (fixed ports from ``master_port``; worker 0 at ``hosts[0]`` is the
            chief). A restart restarts this node's tasks only.
        node_rank: this node's index in ``hosts``.
        master_port: first port of a multi-node cluster (the chief's).
        elastic: a training task other than the chief that is killed by a
            signal is started again alone and catches up from the survivors
            (`distrib.comm.elastic`; sets ``DISTRIB_ELASTIC=1`` in every task);
            each replacement uses one of ``max_restarts``. A task that leaves
            the running job on purpose (`distrib.comm.elastic.request_leave`)
            exits with 0: the others go on (docs/elastic.md).
        rejoins: with ``elastic``, how many times a task that left the running
            job is started again at once to rejoin it (it is admitted at a
            step boundary and the global batch is split among more replicas).
        start_workers: with ``elastic``, how many of the job's workers start
            it (workers ``0..start_workers-1``, the whole cluster's count across
            nodes); the others join the running job as they come up, at a step
            boundary (``distrib launch --workers MIN:MAX``, ``--nnodes MIN:MAX``).
            Default: all of them start it.
        fork_server: a `distrib.process.fork_client.SharedForkServer` that
            outlives this launch: every task it can start exactly is a fork of
            it, the first ones included (for a program, such as a test
            suite, that runs many launches and would otherwise pay
            ``import torch`` in every task). Unless ``DISTRIB_LAUNCH_FORK=0``.
        output_from: whose standard output reaches ``output`` when it is the
            terminal or a stream: ``"chief"`` (the default), ``"all"``,
            ``"none"`` or a list such as ``"0,1"`` or ``"worker:1,ps"``
            (`distrib.launch.output_select`); every task's standard error
            always does, and ``"capture"`` keeps everything.
        log_dir: also append each task's whole output to ``log_dir/<task>.log``
            and the launcher's lines to ``log_dir/launcher.log``
            (`distrib.launch.output_logs`).
    """

    module: bool = False
    workers: int = 1
    chief: bool = False
    ps: int = 0
    evaluator: bool = False
    max_restarts: int = 0
    env: Optional[Mapping[str, Optional[str]]] = None
    cwd: Optional[str] = None
    timeout: Optional[float] = None
    host: str = "127.0.0.1"
    output: Union[None, str, TextIO] = None
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    python: Optional[str] = None
    verbose: bool = False
    hosts: Optional[Sequence[str]] = None
    node_rank: int = 0
    master_port: int = DEFAULT_MASTER_PORT
    elastic: bool = False
    rejoins: int = 0
    start_workers: Optional[int] = None
    fork_server: Optional["SharedForkServer"] = None
    output_from: Optional[str] = None
    log_dir: Optional[str] = None

    def replace(self, **changes: Any) -> "LaunchConfig":
        """This configuration with ``changes`` (field names of `LaunchConfig`).

        Raises:
            TypeError: a name that is not one of its fields.
        """
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(LaunchConfig)})
        if unknown:
            raise TypeError(f"launch() got an unexpected keyword argument {unknown[0]!r} (a LaunchConfig field "
                            f"name, such as 'workers', was expected)")
        return dataclasses.replace(self, **changes)

    def launch_config(self) -> "LaunchConfig":
        """Just the `LaunchConfig` fields (a subclass, the command line's, drops its own)."""
        return LaunchConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(LaunchConfig)})
