"""Starting and ending local processes: the layer below the launcher and the strategies.

Everything in distrib that starts a process on this machine does it here, so
every such process gets the same guarantees (see `spawn`): it dies with the
process that started it, its output goes where the caller asked, and its exit
status is read and described one way (`exit_codes`). `distrib launch`
(`distrib.launch`) starts a cluster's tasks with it; Mirrored-style local
replicas (`distrib.strategies.local_replicas.connect`) start their sibling replicas
with it. Free ports for either come from `ports`.

Modules: `spawn` (one process), `ports` (free TCP ports), `exit_codes`
(the codes the launcher and its tasks share). This package imports nothing
else from distrib.
"""
from distrib.process.exit_codes import (MAX_PREEMPTION_RESTARTS, RESTART_EXIT_CODE,
                                        describe_returncode)
from distrib.process.ports import free_port, reserve_ports
from distrib.process.spawn import python_command, start_process, start_task, wait_or_kill

__all__ = ["free_port", "reserve_ports", "RESTART_EXIT_CODE", "MAX_PREEMPTION_RESTARTS",
           "describe_returncode", "python_command", "start_process", "start_task", "wait_or_kill"]
