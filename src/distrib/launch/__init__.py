"""`distrib launch`: start a local cluster of tasks, each with its ``TF_CONFIG``.

From the shell::

    distrib launch --workers 2 train.py --epochs 3
    python -m distrib launch --workers 2 --chief --max-restarts 3 -m mypkg.train

From Python::

    from distrib.launch import launch
    result = launch("train.py", ["--epochs", "3"], workers=2, output="capture")
    print(result.returncode, result.outputs["worker 1"])
    launch("train.py", config=LaunchConfig(workers=2, max_restarts=1))  # the options as one object

Modules: `config` (`LaunchConfig`, shared with the command line), `layout`
(tasks, ``TF_CONFIG``, environment), `output`, `supervisor` (one attempt),
`signals`, `api` (restarts, the public function), `cli`, `result`. Starting a
process, free ports and exit codes live below, in `distrib.process`
(`ports` and `exit_codes` here are aliases for old imports).
"""
from distrib.launch.api import DEFAULT_GRACE_SECONDS, launch
from distrib.launch.config import LaunchConfig
from distrib.process.exit_codes import MAX_PREEMPTION_RESTARTS, RESTART_EXIT_CODE
from distrib.launch.layout import ClusterLayout, TaskSpec, build_cluster, tf_config
from distrib.process.ports import free_port, reserve_ports
from distrib.launch.result import LaunchResult, LaunchTimeoutError, TaskStatus

__all__ = [
    "launch",
    "LaunchConfig",
    "LaunchResult",
    "LaunchTimeoutError",
    "TaskStatus",
    "RESTART_EXIT_CODE",
    "MAX_PREEMPTION_RESTARTS",
    "DEFAULT_GRACE_SECONDS",
    "ClusterLayout",
    "TaskSpec",
    "build_cluster",
    "tf_config",
    "free_port",
    "reserve_ports",
]
