"""Several replicas per task: one process per local device.

distrib runs one process per replica. When a task must drive D local devices
(``MirroredStrategy(["cpu:0", "cpu:1"])`` from a plain ``python train.py``, or
a multi-worker task given ``local_devices``), the task's own process becomes
local replica 0 and re-launches the same command line D-1 times, the way
PyTorch Lightning does; each child learns its index from
``DISTRIB_LOCAL_REPLICA=index/count/port``. The whole script runs in every
replica, started as the program itself was (same interpreter options, the
script, ``-m module`` or ``-c`` code, in the directory the program started
in: see `distrib.process.rerun`), so a program that changes directory, before
or after importing distrib, does so the same way in each; only local replica 0's standard output is shown (the children's is
discarded, their standard error is kept and shown if they fail), so output is
not duplicated. The children are started the launcher's way
(`distrib.process.spawn.start_process`): they die with replica 0, even if it
is killed with SIGKILL, and stay in its process group, so a Ctrl-C reaches
every replica. A cluster of W tasks with D devices each has W·D replicas,
ranked task by task.

Example (task ``worker 1`` of 2, devices ``cpu:0``/``cpu:1``):
    local replica 0 -> rank 2, local replica 1 -> rank 3, world size 4
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

import distrib
from distrib import hooks
from distrib.cluster.resolver_base import ClusterResolver
from distrib.cluster.task import TaskInfo
from distrib.comm.errors import last_error_line
from distrib.comm.health import add_departure_note
from distrib.process import fork_channel
from distrib.process.fork_client import FORK_ENV, ForkedProcess
from distrib.process.fork_rules import can_fork
from distrib.process.exit_codes import describe_returncode
from distrib.process.ports import free_port
from distrib.process.rerun import rerun_command
from distrib.process.spawn import start_process, wait_or_kill

__all__ = ["LocalReplicas", "ENV_VAR", "connect_replicas"]

ENV_VAR = "DISTRIB_LOCAL_REPLICA"
_TAIL_BYTES = 8192  # the end of a sibling's standard error read for its last error line
_REAP_SECONDS = 60.0  # how long replica 0, at exit, waits for each sibling before killing it


class LocalReplicas:
    """This process's place among the local replicas of its task; see module docstring."""

    def __init__(self, base: Any, labels: Sequence[str], devices: Sequence[torch.device],
                 port: Optional[int] = None) -> None:
        self.base = base
        self.labels = list(labels)
        self.count = len(self.labels)
        env = os.environ.get(ENV_VAR)
        if env:
            index, count, env_port = (int(v) for v in env.split("/"))
            if count != self.count:
                raise ValueError(f"{ENV_VAR}={env} says {count} local replicas, but the strategy "
                                 f"was given {self.count} devices {self.labels}")
            self.index, self.port = index, env_port
        else:
            self.index = 0
            self.port = port if port is not None else (free_port() if self._needs_own_port() else 0)
        self.device = devices[self.index]
        self._children: List[Tuple[int, Any, Any]] = []  # (index, Popen or ForkedProcess, stderr file)

    def _needs_own_port(self) -> bool:
        return self.count > 1 and _base_address(self.base) is None

    # ------------------------------------------------ resolver-like view
    @property
    def task_type(self):
        return self.base.task_type

    @property
    def task_id(self):
        return self.base.task_id

    def cluster_spec(self):
        return self.base.cluster_spec()

    @property
    def rank(self) -> Optional[int]:
        base_rank = self.base.rank
        return None if base_rank is None else base_rank * self.count + self.index

    @property
    def world_size(self) -> int:
        return self.base.world_size * self.count

    @property
    def is_chief(self) -> bool:
        return bool(self.base.is_chief) and self.index == 0

    @property
    def rendezvous_address(self) -> Optional[Tuple[str, int]]:
        address = _base_address(self.base)
        return address if address is not None else ("127.0.0.1", self.port)

    def describe(self, rank: int) -> str:
        task, local = divmod(rank, self.count)
        if self.count == 1:
            return self.base.describe(task)
        if self.base.world_size == 1 and self.base.task_type is None:
            return f"replica {local} ({self.labels[local]})"
        return f"{self.base.describe(task)} replica {local} ({self.labels[local]})"

    @property
    def cluster_field(self) -> str:
        """Where the cluster came from, for error messages (e.g. ``"TF_CONFIG['cluster']"``)."""
        return self.base.cluster_field

    @property
    def task(self) -> Optional[TaskInfo]:
        return self.base.task

    @property
    def chief_task(self) -> Optional[TaskInfo]:
        return self.base.chief_task

    @property
    def chief_address(self) -> Optional[str]:
        return self.base.chief_address

    @property
    def replica_tasks(self) -> List[TaskInfo]:
        return self.base.replica_tasks

    @property
    def rpc_layer(self) -> Optional[str]:
        return self.base.rpc_layer

    @property
    def environment(self) -> str:
        return self.base.environment

    def num_accelerators(self, task_type: Optional[str] = None, task_id: Optional[int] = None) -> Dict[str, int]:
        return self.base.num_accelerators(task_type, task_id)

    def master(self, task_type: Optional[str] = None, task_id: Optional[int] = None,
               rpc_layer: Optional[str] = None) -> str:
        return self.base.master(task_type, task_id, rpc_layer)

    # ------------------------------------------------------- launching
    def launch_children(self) -> None:
        """From local replica 0: start replicas 1..count-1 running this same command line."""
        if self.index != 0 or self.count == 1 or os.environ.get(ENV_VAR):
            return
        hooks.install_excepthook()  # a program that cannot be re-run gets one error line
        command = rerun_command(distrib._START_DIRECTORY,
                                f"{self.count} local replicas need this program re-run once per device")
        threads = str(max(1, (os.cpu_count() or 1) // self.count))
        for index in range(1, self.count):
            env = dict(os.environ, **{ENV_VAR: f"{index}/{self.count}/{self.port}"})
            env.setdefault("OMP_NUM_THREADS", threads)
            err = tempfile.TemporaryFile(mode="w+b")
            proc = _start_replica([sys.executable, *command.args], env, command.cwd, err)
            self._children.append((index, proc, err))
        if "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(int(threads))
        add_departure_note(self.last_error_line)  # "replica 1 is gone" carries replica 1's own reason
        hooks.at_exit(self._reap_children)

    def last_error_line(self, rank: int) -> Optional[str]:
        """The last error line replica ``rank`` (one this process started) wrote to its standard error."""
        for index, _, err in self._children:
            if self.rank is not None and self.rank - self.index + index == rank:
                size = os.fstat(err.fileno()).st_size
                tail = os.pread(err.fileno(), min(size, _TAIL_BYTES), max(0, size - _TAIL_BYTES))
                return last_error_line(tail.decode(errors="replace"))
        return None

    def _reap_children(self) -> None:
        failed = []
        for index, proc, err in self._children:
            code = wait_or_kill(proc, _REAP_SECONDS)
            if code != 0:
                err.seek(0)
                line = last_error_line(err.read().decode(errors="replace")) or ""
                failed.append(f"local replica {index} ({self.labels[index]}) "
                              f"{describe_returncode(code)}: {line}")
            err.close()
        if failed:
            sys.stderr.write("distrib: error: " + "; ".join(failed) + "\n")
            sys.stderr.flush()
            os._exit(1)


def _start_replica(command: List[str], env: Dict[str, str], cwd: Optional[str], err: Any) -> Any:
    """A sibling replica: a fork of the server that forked this process where that is exact, else a new process.

    Exact: what `distrib launch` forks (`fork_rules.can_fork` against the server's start-up environment),
    unless ``DISTRIB_LAUNCH_FORK=0``; see docs/local-replicas.md.
    """
    line = fork_channel.current()
    if (line is not None and os.environ.get(FORK_ENV, "").strip() != "0"
            and can_fork(command, env, line.server_env, cwd=cwd, runtime=line.runtime)):
        try:
            return ForkedProcess(line.start(command, env, cwd, stderr=err.fileno()), None, None, line)
        except OSError:
            pass  # the server is gone or refused: a new process, as without one
    return start_process(command, env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, new_session=False)


#: Connections made in this process, by (devices, task, job): a second strategy
#: over the same replicas reuses them instead of re-launching the program again.
_CONNECTED: Dict[Tuple[Any, ...], Tuple["LocalReplicas", Any]] = {}


def _base_address(base: Any) -> Optional[Tuple[str, int]]:
    """The job's rendezvous address from a distrib `ClusterResolver` (None in a single-process job); None
    for a resolver of another kind (a TF-style one the user wrote knows no rendezvous address)."""
    return base.rendezvous_address if isinstance(base, ClusterResolver) else None


def connect_replicas(base: Any, labels: Sequence[str], devices: Sequence[torch.device], options: Any):
    """Start this task's local replicas and join every replica of the job.

    Returns ``(replicas, collective)``; the collective is local when the job
    has one replica (or this task is an evaluator beside it). A second
    strategy over the same devices and job in the same program (as TF allows)
    gets the first one's replicas and collective: the program is not
    re-launched and the replicas do not meet again.
    """
    from distrib.comm.collective import LocalCollective

    key = (tuple(labels), base.task_type, base.task_id, base.rank, base.world_size,
           _base_address(base), options.backend_for(devices[0]))
    if key in _CONNECTED and not _CONNECTED[key][1].closed:
        return _CONNECTED[key]
    replicas = LocalReplicas(base, labels, devices)
    replicas.launch_children()
    if replicas.rank is None or replicas.world_size <= 1:
        return replicas, LocalCollective()
    from distrib.comm.torch_collective import TorchCollective
    from distrib.comm.elastic import elastic_enabled

    if elastic_enabled():
        from distrib.comm.elastic.collective import ElasticCollective as connector
    else:
        connector = TorchCollective
    _CONNECTED[key] = (replicas, connector.connect(replicas, options, replicas.device))
    return _CONNECTED[key]
