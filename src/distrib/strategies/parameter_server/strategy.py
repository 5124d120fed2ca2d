"""`ParameterServerStrategy`: asynchronous training with variables on parameter servers.

Every task of the cluster runs the same script (``distrib launch --chief
--workers 2 --ps 1 train.py``). Constructing the strategy joins the task to
the job's channel (gRPC, authenticated with the job secret), and then:

* on a **ps** or **worker** task it *serves* — holding variables, or running
  the functions the chief schedules — until the chief's program ends, and
  then exits the process with status 0 (TensorFlow's ``server.join()``:
  nothing after it in the script runs there; see
  `distrib.strategies.parameter_server.serve.serve_forever_and_exit`);
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

import contextlib
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import torch

from distrib import hooks
from distrib.cluster.task import TaskInfo
from distrib.comm.collective import Collective, LocalCollective
from distrib.comm.options import CommunicationOptions
from distrib.data.distribution.input_context import InputContext, InputPlacement
from distrib.hooks import install_excepthook
from distrib.strategies import context
from distrib.strategies.cross_replica import gather_values, reduce_values
from distrib.strategies.interface import Strategy, StrategyBoundState
from distrib.strategies.step_scheduler import StepScheduler
from distrib.strategies.parameter_server import server as ps_server
from distrib.strategies.parameter_server.cluster import PSCluster
from distrib.strategies.parameter_server.coordinated import Coordinated
from distrib.strategies.parameter_server.handlers import role_handlers
from distrib.strategies.parameter_server.exporter import Exporter, hyper_parameters
from distrib.strategies.parameter_server.registered import registered_only
from distrib.strategies.parameter_server.runtime import Runtime
from distrib.strategies.parameter_server.serve import serve_forever_and_exit
from distrib.strategies.parameter_server.variables import VariableRegistry, device_name
from distrib.utils.host_allocator import tune_host_allocator
from distrib.utils.nest import map_structure

__all__ = ["ParameterServerStrategy"]


class ParameterServerStrategy(Strategy, Coordinated):
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

    def __init__(self, cluster_resolver: Any = None, variable_partitioner: Optional[Callable] = None, *,
                 communication_options: Optional[CommunicationOptions] = None) -> None:
        from distrib.cluster import resolve_cluster

        install_excepthook()
        tune_host_allocator()
        resolver = cluster_resolver if cluster_resolver is not None else resolve_cluster()
        cluster = PSCluster.from_resolver(resolver)
        closed = registered_only()  # a bad DISTRIB_PS_FUNCTIONS fails before anything starts
        self._resolver = resolver
        self._cluster = cluster
        self._communication_options = communication_options or CommunicationOptions()
        self._collective = LocalCollective()
        self._device = torch.device("cpu")
        self._scope_depth = 0
        self._partitioner = variable_partitioner
        self._runtime: Optional[Runtime] = None
        self._registry: Optional[VariableRegistry] = None
        self._exporter: Optional[Exporter] = None
        self._coordinator: Any = None
        self._guard: Any = None
        role = cluster.task.task_type
        if role == "evaluator":
            return
        runtime = Runtime(cluster, self._communication_options.timeout, role_handlers(role))
        runtime.start()
        if role != "chief":
            serve_forever_and_exit(runtime, self)  # a worker or ps task: TF's server.join()
        self._runtime = runtime
        self._registry = VariableRegistry(runtime, cluster.ps_ids, variable_partitioner, self._captures_here)
        self._exporter = Exporter(self, self._registry, self._classify, self._register_optimizer,
                                  closed=closed)
        self._guard = hooks.optimizer_step_pre_hook(self._refuse_local_step)
        hooks.at_exit(self._shutdown)

    # ----------------------------------------------------------- identity
    @property
    def num_replicas_in_sync(self) -> int:
        """1: each scheduled function is one replica's step on one worker."""
        return 1

    @property
    def replica_id(self) -> int:
        return 0

    @property
    def cluster_resolver(self) -> Any:
        """The resolver describing the job (``task_type``, ``task_id``, ``cluster_spec()``)."""
        return self._resolver

    @property
    def is_chief(self) -> bool:
        return self._cluster.task.task_type == "chief"

    @property
    def device(self) -> torch.device:
        """Where scheduled functions compute on a worker (the CPU)."""
        return self._device

    @property
    def collective(self) -> Collective:
        """A local collective: tasks talk through the parameter-server channel instead."""
        return self._collective

    @property
    def communication_options(self) -> CommunicationOptions:
        return self._communication_options

    @property
    def cluster(self) -> PSCluster:
        """The parameter-server cluster (tasks, names, addresses)."""
        return self._cluster

    @property
    def variable_partitioner(self) -> Optional[Callable]:
        return self._partitioner

    # -------------------------------------------------------------- input
    def input_placement(self) -> InputPlacement:
        """One replica reading its own pipeline (what a scheduled function sees on a worker)."""
        return InputPlacement()

    def input_context(self) -> InputContext:
        """On a worker: one input pipeline per worker, this worker's (for per-worker datasets)."""
        if self._cluster.task.task_type == "worker":
            ids = self._cluster.worker_ids
            return InputContext(num_input_pipelines=len(ids),
                                input_pipeline_id=ids.index(self._cluster.task.task_id), num_replicas_in_sync=1)
        return self.input_placement().input_context()

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """Whole batches, for one replica (a per-worker dataset on a worker)."""
        from distrib.data.distribution.distributed import distribute_dataset

        return distribute_dataset(self, dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable, options: Any = None) -> Any:
        """``dataset_fn(input_context)``, with this worker's `input_context` on a worker."""
        from distrib.data.distribution.distributed import distribute_from_function

        return distribute_from_function(self, dataset_fn, options)

    # -------------------------------------------------------------- scope
    @contextlib.contextmanager
    def scope(self) -> Iterator["ParameterServerStrategy"]:
        """Parameters registered inside (on the chief) are placed on the ps tasks when it closes."""
        outermost = self._registry is not None and self._scope_depth == 0
        if outermost:
            self._registry.start_capture()
        ok = False
        context.push(self)
        self._scope_depth += 1
        try:
            yield self
            ok = True
        finally:
            self._scope_depth -= 1
            context.pop(self)
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

    # ------------------------------------------------------ replica work
    def run(self, fn: Callable, args: Sequence = (), kwargs: Optional[dict] = None) -> Any:
        """Run ``fn`` as this process's one replica (inside a scheduled function, on a worker)."""
        args = map_structure(self._to_device, tuple(args))
        kwargs = map_structure(self._to_device, dict(kwargs or {}))
        with context.replica_context(self):
            return fn(*args, **kwargs)

    def _to_device(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.device != self._device:
            return value.to(self._device, non_blocking=True)
        return value

    def reduce(self, reduce_op: Any, value: Any, axis: Optional[int] = None) -> Any:
        """Combine this process's replica value(s); see `distrib.Strategy.reduce`."""
        return reduce_values(self._collective, self.comm_device, 1, reduce_op, value, axis)

    def gather(self, value: Any, axis: int = 0) -> Any:
        return gather_values(self._collective, self.comm_device, value, axis)

    def experimental_local_results(self, value: Any) -> Tuple[Any, ...]:
        return self.own_results(value)

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

    def channel_address(self, task_type: str, task_id: int = 0) -> str:
        """``host:port`` of a task's authenticated gRPC server (the port it chose at start-up)."""
        self._require_chief("channel_address")
        return self._runtime.channel_address(TaskInfo(task_type, task_id))

    def _place_pending(self) -> None:
        """Before a function is scheduled: place new variables, send the values written since placement."""
        registry = self._require_chief("schedule")
        registry.place_pending()
        registry.send_first_values()

    def pull(self, module: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> None:
        """Copy the trained values into the chief's ``module`` and the step counts into ``optimizer``.

        After `Model.fit` / `evaluate`, ``module``'s parameters read as the ps
        tasks hold them and ``optimizer.state[p]["step"]`` (what
        ``optimizer.iterations`` counts) as far as the ps tasks counted.
        """
        registry = self._require_chief("pull")
        registry.refresh(module)
        if optimizer is None or not any(registry.info(p) for g in optimizer.param_groups for p in g["params"]):
            return
        params = [p for g in optimizer.param_groups for p in g["params"]]
        for index, slots in optimizer.state_dict()["state"].items():  # read from the ps tasks
            if "step" in slots and index < len(params):
                optimizer.state[params[index]]["step"] = slots["step"]

    def coordinator_parts(self) -> Tuple[Runtime, Dict[int, Any], Callable[..., None]]:
        """What a `ClusterCoordinator` dispatches with: the channel, the exported definitions and the
        function that adds a closure's metric changes to the chief's metrics.

        Raises:
            RuntimeError: on a task that is not the chief (an evaluator).
        """
        if self._runtime is None or self._exporter is None:
            raise RuntimeError(f"ClusterCoordinator runs on the chief, but this process is "
                               f"{self.cluster_resolver.describe()}")
        return self._runtime, self._exporter.definitions, self._apply_metric_deltas

    # ---------------------------------------------------------- execution
    def step_scheduler(self) -> Optional[StepScheduler]:
        """On the chief, the `ClusterCoordinator`: `Model.fit` schedules its steps on the workers.
        Elsewhere (an evaluator) None: steps run in this process."""
        if self._runtime is None:
            return None
        if self._exporter is not None and self._exporter.closed:
            from distrib.strategies.parameter_server.registered import MODE_VARIABLE, RegisteredOnlyError

            raise RegisteredOnlyError(f"Model.fit, evaluate and predict under ParameterServerStrategy send their "
                                      f"training loop to the workers by value, which {MODE_VARIABLE}=registered "
                                      f"does not allow: write the loop with coordinator.schedule and registered "
                                      f"functions (docs/parameter-server.md), or unset {MODE_VARIABLE} and give "
                                      f"the job a secret")
        from distrib.strategies.parameter_server.coordinator import ClusterCoordinator

        return ClusterCoordinator(self)

    # ---------------------------------------------------------- exporting
    def _classify(self, obj: Any) -> Optional[str]:
        from distrib.strategies.parameter_server.coordinator import ClusterCoordinator
        from distrib.strategies.parameter_server.values import PerWorkerValues

        if isinstance(obj, PerWorkerValues):
            return "per_worker"
        if isinstance(obj, StrategyBoundState) and obj.distribute_strategy is self:
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
        class_ref = ps_server.class_name(type(optimizer))
        for ps, groups in per_ps.items():
            self._runtime.call(TaskInfo("ps", ps), ps_server.create_optimizer, (key, class_ref, defaults, groups))
        from distrib.strategies.parameter_server.optimizer_state import OptimizerStateSync

        OptimizerStateSync(self._runtime, self._registry, key, optimizer)  # its state_dict reads the ps tasks

    def _apply_metric_deltas(self, deltas: Dict[int, Dict[str, torch.Tensor]]) -> None:
        for key, changes in deltas.items():
            metric = self._exporter.objects[key]
            states = metric.state_tensors()
            for name, change in changes.items():
                if name not in states:  # created by the metric's first update on a worker
                    metric.add_state(name, tuple(change.shape))
                    states = metric.state_tensors()
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
        if self._guard is not None:
            self._guard.remove()
            self._guard = None
        if self._runtime is not None:
            self._runtime.shutdown_cluster()

    def __repr__(self) -> str:
        c = self._cluster
        return (f"ParameterServerStrategy(task={c.describe(c.task.task_type, c.task.task_id)}, "
                f"workers={c.num_workers}, ps={c.num_ps})")
