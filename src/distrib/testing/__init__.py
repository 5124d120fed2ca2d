"""Multi-process test harness: real task processes on 127.0.0.1, started by the launcher.

* `run_cluster(fn, num_workers=2, ...)`: run a module-level function in every
  training task, get back each task's return value (JSON, rank order).
* `run_script(path_or_module, num_workers=2, ...)`: run a script as a cluster,
  get its `LaunchResult` with per-task output captured.
* `run_python(args, env=..., cwd=..., timeout=...)`: ``subprocess.run`` of
  ``python *args`` with its output captured, forked from the test process's
  preloaded server where that is exact (as the tasks of both above are);
  `start_python(args, output=file, ...)` starts one without waiting.
* `free_port(host)`: a free TCP port.
* `NamespaceHosts(n)` (`distrib.testing.netns`): ``n`` "machines" as network
  namespaces on a private bridge, for multi-host tests (root only;
  `namespaces_available()` says why not).
* `create_in_process_cluster(num_workers=2, num_ps=2)`: worker and ps tasks
  as local child processes; returns the chief's resolver for
  `ParameterServerStrategy` in this process.
* `ClusterRunError`: raised by `run_cluster` (any failure) and by either on
  timeout; its message lists every task's exit status and last output lines.
* `distrib.testing.simulated`: ``run_workers(fn, n)`` runs ``n`` workers as
  threads of this process, each with a `SimulatedStrategy` over a real
  thread collective (imported on its own: it needs torch).
"""
from distrib.process.ports import free_port
from distrib.testing.child import to_jsonable
from distrib.testing.in_process_cluster import create_in_process_cluster
from distrib.testing.harness import TAIL_LINES, ClusterRunError, run_cluster, run_python, run_script, start_python
from distrib.testing.netns import NamespaceHosts, namespaces_available

__all__ = ["run_cluster", "run_script", "run_python", "start_python", "free_port", "ClusterRunError", "to_jsonable", "TAIL_LINES",
           "NamespaceHosts", "namespaces_available", "create_in_process_cluster"]
