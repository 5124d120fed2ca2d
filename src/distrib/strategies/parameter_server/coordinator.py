"""``distrib.coordinator``: TensorFlow's ``tf.distribute.experimental.coordinator``.

`ClusterCoordinator` schedules functions on the workers of a
`ParameterServerStrategy` and collects their results as `RemoteValue` s;
`PerWorkerValues` are values held on every worker (per-worker datasets and
iterators). Guide: docs/parameter-server.md.

Example (the chief's program; workers and ps tasks run the same script and
serve inside the strategy's constructor):
    >>> strategy = distrib.experimental.ParameterServerStrategy()
    >>> with strategy.scope():
    ...     model = torch.nn.Linear(4, 1)
    ...     optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> coordinator = distrib.coordinator.ClusterCoordinator(strategy)
    >>> iterator = iter(coordinator.create_per_worker_dataset(lambda: make_dataset()))
    >>> def step_fn(iterator):
    ...     x, y = next(iterator)
    ...     loss = ((model(x) - y) ** 2).mean()
    ...     optimizer.zero_grad(); loss.backward(); optimizer.step()   # applied on the ps tasks
    ...     return loss.detach()
    >>> for _ in range(100):
    ...     coordinator.schedule(step_fn, args=(iterator,))
    >>> coordinator.join()                                # waits for all 100 steps
    >>> coordinator.schedule(step_fn, args=(iterator,)).fetch()
    array(0.0123, dtype=float32)
"""
from __future__ import annotations

import threading

import torch
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence

from distrib.strategies.parameter_server.coordinated import Coordinated
from distrib.strategies.parameter_server.dispatch import Closure, Dispatcher
from distrib.strategies.parameter_server.errors import CancelledError, UnavailableError
from distrib.strategies.parameter_server.exporter import hyper_parameters
from distrib.strategies.parameter_server.values import PerWorkerDataset, PerWorkerIterator, PerWorkerValues, RemoteValue
from distrib.strategies.parameter_server.worker import refresh_variables
from distrib.utils.nest import map_structure

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["ClusterCoordinator", "RemoteValue", "PerWorkerValues", "PerWorkerDataset", "PerWorkerIterator",
           "UnavailableError", "CancelledError"]


class ClusterCoordinator:
    """Schedules functions on the workers of a `ParameterServerStrategy` (one per strategy).

    Args:
        strategy: the chief's ``ParameterServerStrategy``. Creating a second
            coordinator for the same strategy returns the first.

    Functions run asynchronously, each on whichever worker is free, at most
    one at a time per worker. A function reads the current variables from
    the ps tasks when it starts; ``optimizer.step()`` inside it updates them
    there. If its worker is lost the function runs again on another worker
    (so it may run more than once). The first error (the function raised, a
    ps task was lost, every worker was lost) is raised by the next
    `schedule`, `join` or `done` and by that function's `RemoteValue`.
    """

    def __new__(cls, strategy: "Strategy") -> "ClusterCoordinator":
        existing = strategy._coordinator if isinstance(strategy, Coordinated) else None
        return existing if isinstance(existing, cls) else super().__new__(cls)

    def __init__(self, strategy: "Strategy") -> None:
        if not isinstance(strategy, Coordinated):
            raise TypeError(f"ClusterCoordinator needs a ParameterServerStrategy, got {type(strategy).__name__}")
        if strategy._coordinator is self:
            return
        runtime, definitions, apply_metric_deltas = strategy.coordinator_parts()
        self._strategy = strategy
        self._lock = threading.Lock()
        self._dispatcher = Dispatcher(runtime, strategy.cluster.worker_ids, definitions, apply_metric_deltas)
        strategy._coordinator = self

    @property
    def strategy(self) -> "Strategy":
        return self._strategy

    # ------------------------------------------------------------ schedule
    def schedule(self, fn: Callable, args: Optional[Sequence] = None,
                 kwargs: Optional[Dict[str, Any]] = None) -> RemoteValue:
        """Queue ``fn(*args, **kwargs)`` to run on some worker; returns its `RemoteValue` at once.

        ``fn`` and what it uses are copied to the worker when you call
        ``schedule`` (later changes to plain Python values are not seen),
        except variables, modules and optimizers created in the scope,
        metrics created in the scope and `PerWorkerValues`, which are shared.
        A `PerWorkerValues` argument becomes the value of the worker the
        function runs on.
        """
        s = self._strategy
        with self._lock:
            s._place_pending()
            payload, keys = s._exporter.export_closure(fn, tuple(args or ()), dict(kwargs or {}))
            hyper = {k: hyper_parameters(s._exporter.objects[k]) for k in keys
                     if s._exporter.definitions[k].kind == "optimizer"}
        closure = Closure(payload, keys, hyper)
        self._dispatcher.submit(closure)
        return closure.value

    def share(self, *objects: Any) -> None:
        """Create on the cluster now the variables, modules, optimizers and metrics ``objects`` use.

        Scheduling does this on first use; `Model.fit` does it before its
        callbacks run, so that restoring a backup (``optimizer.load_state_dict``)
        reaches the optimizer's state on the ps tasks.
        """
        s = self._strategy
        with self._lock:
            s._place_pending()
            for obj in objects:
                s._exporter.export_value(obj)

    def pull(self, module: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> None:
        """Copy the trained variables into ``module`` and the step counts into ``optimizer`` (the chief's)."""
        with self._lock:
            self._strategy.pull(module, optimizer)

    between_steps = staticmethod(refresh_variables)

    def join(self) -> None:
        """Wait until every scheduled function has finished; raise the first error, if any."""
        self._dispatcher.join()

    def done(self) -> bool:
        """Whether every scheduled function has finished (raises the first error, if any)."""
        return self._dispatcher.done()

    def fetch(self, val: Any) -> Any:
        """``RemoteValue.fetch()`` on every `RemoteValue` in a nested structure."""
        return map_structure(lambda v: v.fetch() if isinstance(v, RemoteValue) else v, val)

    # ----------------------------------------------------------- per worker
    def create_per_worker_dataset(self, dataset_fn: Any) -> PerWorkerDataset:
        """A dataset on every worker: ``dataset_fn()`` called there (or a dataset object, copied).

        ``iter()`` of the result gives per-worker iterators to pass to
        scheduled functions, which call ``next`` on them. A function calling
        ``strategy.distribute_datasets_from_function(fn)`` on a worker gives
        ``fn`` an `InputContext` with ``num_input_pipelines`` = workers and
        ``input_pipeline_id`` = that worker's index, so it can shard.
        """
        recipe = ("call", dataset_fn) if callable(dataset_fn) else ("value", dataset_fn)
        return PerWorkerDataset.from_recipe(recipe)

    @property
    def lost_workers(self) -> Dict[int, str]:
        """Worker ids taken out of service (their process died or stopped answering), with why."""
        return self._dispatcher.lost_workers
