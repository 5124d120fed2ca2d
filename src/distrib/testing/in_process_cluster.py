"""`create_in_process_cluster`: a parameter-server cluster on this machine, for trying PS in one program.

TensorFlow's parameter-server tutorial starts its worker and ps servers
inside the notebook (``multi_process_runner`` / ``create_in_process_cluster``)
and hands a ``SimpleClusterResolver`` to the strategy. Here the ``worker`` and
``ps`` tasks are local child processes (started the way ``distrib launch``
starts tasks: each in its own session and, on Linux, killed when this process
dies), and the calling process is the ``chief``::

    >>> resolver = distrib.testing.create_in_process_cluster(num_workers=2, num_ps=2)
    >>> strategy = distrib.experimental.ParameterServerStrategy(resolver)   # this process: the chief
    >>> resolver.task_type, resolver.task_id
    ('chief', 0)

The children serve until the chief's strategy ends (the end of the program),
then exit; their output goes to this process's standard error, each line
prefixed with the task (``[worker 1] ...``). They are forks of one preloaded
server (`distrib.testing`'s, which has imported PyTorch once) where that is
exact, else new processes. Functions the chief schedules
travel by value, so functions defined in a notebook or ``__main__`` work.
If no job secret is set, one is made and put in ``os.environ`` (the children
and this process share it).
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import IO, Any, Dict, List, Optional

from distrib import hooks
from distrib.cluster.simple import SimpleClusterResolver
from distrib.comm.secret import SECRET_ENV, SECRET_FILE_ENV, new_secret
from distrib.launch.layout import ClusterLayout, build_cluster, task_environment
from distrib.launch.ports import reserve_ports
from distrib.process.spawn import python_command, signal_task
from distrib.testing.harness import start_piped_task

__all__ = ["create_in_process_cluster", "InProcessCluster"]

_SERVE = "distrib.testing.ps_task"
_CLUSTERS: List["InProcessCluster"] = []


class InProcessCluster:
    """The child tasks of an in-process cluster (kept so they can be awaited and stopped).

    Args:
        resolver: the chief's resolver (this process).
        procs: ``{"worker 0": Popen, ...}``.
    """

    def __init__(self, resolver: SimpleClusterResolver, procs: Dict[str, Any]) -> None:
        self.resolver = resolver
        self.procs = procs

    def poll(self) -> Dict[str, Optional[int]]:
        """Each child's exit status (None while it runs)."""
        return {name: proc.poll() for name, proc in self.procs.items()}

    def stop(self, timeout: float = 30.0) -> None:
        """Wait up to ``timeout`` seconds for the children to exit (they do when the chief ends), then kill them."""
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                signal_task(proc, 9)
                proc.wait(timeout=timeout)


def _pump(name: str, stream: IO[bytes]) -> None:
    for line in iter(stream.readline, b""):
        sys.stderr.write(f"[{name}] {line.decode(errors='replace')}")
    stream.close()


def create_in_process_cluster(num_workers: int = 2, num_ps: int = 2, *, host: str = "127.0.0.1",
                              env: Optional[Dict[str, str]] = None) -> SimpleClusterResolver:
    """Start ``num_workers`` worker and ``num_ps`` ps tasks as child processes; return the chief's resolver.

    Args:
        num_workers: worker tasks (at least 1).
        num_ps: parameter-server tasks (at least 1).
        host: the address every task binds (ports are picked free now).
        env: extra environment variables for the children.

    Returns:
        A `distrib.cluster.SimpleClusterResolver` for this process as
        ``chief`` 0, to pass to `ParameterServerStrategy`. Its
        ``in_process_cluster`` attribute is the `InProcessCluster`.

    Raises:
        ValueError: a count is below 1.
    """
    for field, value in (("num_workers", num_workers), ("num_ps", num_ps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"create_in_process_cluster: {field} must be an integer >= 1, got {value!r}")
    if SECRET_ENV not in os.environ and SECRET_FILE_ENV not in os.environ:
        os.environ[SECRET_ENV] = new_secret()
    layout = ClusterLayout(workers=num_workers, chief=True, ps=num_ps)
    tasks = layout.tasks()
    cluster = build_cluster(layout, host, reserve_ports(len(tasks), host))
    base = {**os.environ, **(env or {})}
    if "PYTHONPATH" not in base:
        base["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    procs: Dict[str, Any] = {}
    for task in tasks:
        if task.task_type == "chief":
            continue
        task_env = task_environment(base, cluster, task, num_training_tasks=num_workers + 1, restart_count=0)
        proc = start_piped_task(python_command(_SERVE, [], module=True), task_env, cwd=os.getcwd())
        procs[task.name] = proc
        for stream in (proc.stdout, proc.stderr):
            threading.Thread(target=_pump, args=(task.name, stream), daemon=True,
                             name=f"distrib-in-process-{task.name}").start()
    resolver = SimpleClusterResolver(cluster, task_type="chief", task_id=0)
    handle = InProcessCluster(resolver, procs)
    resolver.in_process_cluster = handle  # type: ignore[attr-defined]
    _CLUSTERS.append(handle)
    return resolver


def _stop_all() -> None:
    # Runs after the strategy's own atexit shutdown (atexit is last-in, first-out and this module
    # is imported before any strategy is made), so the children are told to exit first.
    for handle in _CLUSTERS:
        handle.stop(timeout=10.0)


hooks.at_exit(_stop_all)
