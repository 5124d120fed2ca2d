"""`ParameterServerStrategy`: asynchronous training with variables on parameter servers.

Every task of the cluster runs the same script (``distrib launch --chief
--workers 2 --ps 1 train.py``). Constructing the strategy joins the task to
the job's channel (gRPC, authenticated with the job secret), and then:

* on a **ps** or **worker** task it *serves* — holding variables, or running
  the functions the chief schedules — until the chief's program ends, and
  then exits the process with status 0 (``SystemExit`` raised from the
  constructor: nothing after it in the script runs there; this is
  TensorFlow's ``server.join()``);
* on the **chief** it returns: the chief runs the program, creates the
  model in ``strategy.scope()`` (its parameters are placed on the ps tasks)
  and uses a `distrib.coordinator.ClusterCoordinator` to schedule steps on
  the workers; when its program ends (``atexit``) it tells the other tasks to
  exit;
* on an **evaluator** it is a plain one-process strategy (side-car evaluation
  reads checkpoints).

The optimizer is plain PyTorch: create it in the scope on the chief
(``torch.optim.RMSprop(model.parameters(), lr=0.1)``); each ps builds the same
optimizer over the variables it holds and applies the gradients that
``optimizer.step()`` inside a scheduled function sends. Learning-rate changes
made on the chief reach the ps with the next scheduled function.

Example:
    >>> strategy = distrib.experimental.ParameterServerStrategy()   # workers/ps serve here, then exit
    >>> with strategy.scope():
    ...     model = torch.nn.Linear(10, 1)                           # weight on ps 0, bias on ps 1
    ...     optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> coordinator = distrib.coordinator.ClusterCoordinator(strategy)
"""
from __future__ import annotations

import atexit
import contextlib
import pickle
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import cloudpickle
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from distrib.cluster.task import TaskInfo
from distrib.comm.options import CommunicationOptions
from distrib.strategies import context
from distrib.strategies.parameter_server import server as ps_server
from distrib.strategies.base import Strategy
from distrib.strategies.parameter_server.cluster import PSCluster
from distrib.strategies.parameter_server.pickling import Exporter, hyper_parameters
from distrib.strategies.parameter_server.runtime import Runtime
from distrib.strategies.parameter_server.variables import VariableRegistry, device_name

__all__ = ["ParameterServerStrategy"]


class ParameterServerStrategy(Strategy):
    """Asynchronous data parallelism: workers run steps, ps tasks hold and update the variables.

    Args:
        cluster_resolver: the cluster (default: ``TF_CONFIG`` through
            `distrib.cluster.resolve_cluster`); it needs a ``chief``, at least
            one ``worker`` and at least one ``ps`` task.
        variable_partitioner: split large variables along their first axis
            into shards on different ps tasks, e.g.
            ``distrib.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 << 10, max_shards=2)``.
        communication_options: ``timeout_seconds`` bounds start-up, every
            call to a ps, and how long a worker may stop answering before its
            functions move to other workers (default 60 s).

    Raises:
        ClusterConfigError: the cluster has no ps, worker or chief task.
    """

    supported_task_types = ("chief", "worker", "ps", "evaluator")
    tracks_modules = False

    def __init__(self, cluster_resolver: Any = None, variable_partitioner: Optional[Callable] = None, *,
                 communication_options: Optional[CommunicationOptions] = None) -> None:
        from distrib.cluster import resolve_cluster

        resolver = cluster_resolver if cluster_resolver is not None else resolve_cluster()
        cluster = PSCluster.from_resolver(resolver)
        super().__init__(cluster_resolver=resolver, communication_options=communication_options)
        self._cluster = cluster
        self._partitioner = variable_partitioner
        self._runtime: Optional[Runtime] = None
        self._registry: Optional[VariableRegistry] = None
        self._exporter: Optional[Exporter] = None
        self._coordinator: Any = None
        self._worker_view = False
        role = cluster.task.task_type
        if role == "evaluator":
            return
        runtime = Runtime(cluster, self._communication_options.timeout)
        runtime.start()
        if role == "ps":
            runtime.serve()
            raise SystemExit(0)
        if role == "worker":
            from distrib.strategies.parameter_server.worker import serve_worker

            view = type(self)._view_for_worker(resolver, cluster)
            serve_worker(runtime, view, cluster.worker_ids.index(cluster.task.task_id))
            raise SystemExit(0)
        self._runtime = runtime
        self._registry = VariableRegistry(runtime, cluster.ps_ids, variable_partitioner, self._captures_here)
        self._exporter = Exporter(self, self._registry, self._classify, self._register_optimizer)
        self._guard = register_optimizer_step_pre_hook(self._refuse_local_step)
        atexit.register(self._shutdown)

    @classmethod
    def _view_for_worker(cls, resolver: Any, cluster: PSCluster) -> "ParameterServerStrategy":
        """The strategy object scheduled functions see on a worker: one local replica."""
        view = cls.__new__(cls)
        Strategy.__init__(view, cluster_resolver=resolver)
        view._cluster, view._partitioner, view._runtime = cluster, None, None
        view._registry = view._exporter = view._coordinator = None
        view._worker_view = True
        return view

    # ----------------------------------------------------------- identity
    @property
    def cluster(self) -> PSCluster:
        """The parameter-server cluster (tasks, names, addresses)."""
        return self._cluster

    @property
    def variable_partitioner(self) -> Optional[Callable]:
        return self._partitioner

    def input_context(self):
        from distrib.data.input_context import InputContext

        if self._worker_view:
            ids = self._cluster.worker_ids
            return InputContext(num_input_pipelines=len(ids),
                                input_pipeline_id=ids.index(self._cluster.task.task_id), num_replicas_in_sync=1)
        return super().input_context()

    # -------------------------------------------------------------- scope
    @contextlib.contextmanager
    def scope(self) -> Iterator["ParameterServerStrategy"]:
        """Parameters registered inside (on the chief) are placed on the ps tasks when it closes."""
        outermost = self._registry is not None and self._scope_depth == 0
        if outermost:
            self._registry.start_capture()
        ok = False
        try:
            with super().scope() as strategy:
                yield strategy
            ok = True
        finally:
            if outermost:
                self._registry.stop_capture()
                if ok:
                    self._registry.place_pending(defer_lazy=True)

    def _captures_here(self) -> bool:
        return context.current_scope_strategy() is self and context.in_cross_replica_context()

    def track_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Place the parameters of a module built outside the scope on the ps tasks."""
        if self._registry is not None:
            self._registry.adopt(module)
            self._registry.place_pending(defer_lazy=True)
        return module

    # ---------------------------------------------------------- variables
    def _require_chief(self, what: str) -> VariableRegistry:
        if self._registry is None:
            raise RuntimeError(f"ParameterServerStrategy.{what} is only available on the chief")
        return self._registry

    def variable_placement(self, param: torch.Tensor) -> Tuple[str, ...]:
        """Where a variable lives: one TensorFlow device string per shard,
        e.g. ``('/job:ps/replica:0/task:1/device:CPU:0',)``."""
        info = self._require_chief("variable_placement")._require(param)
        return tuple(device_name(s.ps) for s in info.shards)

    def read_variable(self, param: torch.Tensor) -> torch.Tensor:
        """The variable's current value, read from the ps tasks (not the chief's cached copy)."""
        return self._require_chief("read_variable").read([param])[0]

    def ps_inventory(self, ps_id: int) -> Dict[str, Any]:
        """What ps task ``ps_id`` holds: ``{"shards": {(var, shard): shape}, "updates": n}``."""
        self._require_chief("ps_inventory")
        return self._runtime.call(TaskInfo("ps", ps_id), ps_server.inventory)

    def _place_pending(self) -> None:
        self._require_chief("schedule").place_pending()

    # ---------------------------------------------------------- exporting
    def _classify(self, obj: Any) -> Optional[str]:
        from distrib.strategies.parameter_server.coordinator import ClusterCoordinator
        from distrib.metrics.base import Metric
        from distrib.strategies.parameter_server.values import PerWorkerValues

        if isinstance(obj, PerWorkerValues):
            return "per_worker"
        if isinstance(obj, Metric) and obj.distribute_strategy is self:
            return "metric"
        if isinstance(obj, ClusterCoordinator):
            raise TypeError("a scheduled function cannot use the ClusterCoordinator: it runs on a worker; "
                            "schedule functions from the chief's program only")
        return None

    def _register_optimizer(self, key: int, optimizer: torch.optim.Optimizer) -> None:
        """Build the optimizer's part on each ps task that holds some of its variables."""
        hyper = hyper_parameters(optimizer)
        per_ps: Dict[int, list] = {}
        for index, group in enumerate(optimizer.param_groups):
            for p in group["params"]:
                for shard in self._registry.info(p).shards:
                    groups = per_ps.setdefault(shard.ps, [{**hyper[i], "keys": []}
                                                          for i in range(len(optimizer.param_groups))])
                    groups[index]["keys"].append(shard.key)
        defaults = {k: v for k, v in optimizer.defaults.items() if k != "params"}
        for ps, groups in per_ps.items():
            payload = cloudpickle.dumps({"class": type(optimizer), "defaults": defaults, "groups": groups})
            pickle.loads(payload)  # fail here, on the chief, if the class cannot travel
            self._runtime.call(TaskInfo("ps", ps), ps_server.create_optimizer, (key, payload))
        from distrib.strategies.parameter_server.optimizer_state import OptimizerStateSync

        OptimizerStateSync(self._runtime, self._registry, key, optimizer)  # its state_dict reads the ps tasks

    def _apply_metric_deltas(self, deltas: Dict[int, Dict[str, torch.Tensor]]) -> None:
        for key, changes in deltas.items():
            states = self._exporter.objects[key].state_tensors()
            for name, change in changes.items():
                states[name].add_(change.to(states[name].device, states[name].dtype))
        if self._registry is not None:
            self._registry.bump()

    def _refuse_local_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        first = next((p for g in optimizer.param_groups for p in g["params"]), None)
        if self._registry is not None and self._registry.info(first) is not None:
            raise RuntimeError(f"{type(optimizer).__name__}.step() on the chief would change only the chief's "
                               f"copy of variables that live on the ps tasks: run the step in a function "
                               f"given to coordinator.schedule(...)")

    # ----------------------------------------------------------- shutdown
    def _shutdown(self) -> None:
        """End of the chief's program: stop dispatching, tell the workers and ps tasks to exit."""
        if self._coordinator is not None:
            self._coordinator._dispatcher.stop()
        if getattr(self, "_guard", None) is not None:
            self._guard.remove()
            self._guard = None
        if self._runtime is not None:
            self._runtime.shutdown_cluster()

    def __repr__(self) -> str:
        c = self._cluster
        return (f"ParameterServerStrategy(task={c.describe(c.task.task_type, c.task.task_id)}, "
                f"workers={c.num_workers}, ps={c.num_ps})")
