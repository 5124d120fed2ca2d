"""`ReplicatedStrategy`: the one implementation of the replicated strategies.

Default, OneDevice, Mirrored and MultiWorkerMirrored are all this class;
they only choose the devices and the cluster. A replicated strategy is
composed from a cluster resolver (who is in the job), a `Collective` (how
replicas talk) and a device (where this replica computes).
distrib runs one process per replica, so `run` calls the replica function
once, locally, and cross-replica work happens in collectives.

Gradient semantics follow tf.distribute: replica functions divide per-example
losses by the *global* batch size (`distrib.nn.compute_average_loss`) and the
strategy *sums* gradients across replicas before any optimizer steps the
parameters it tracks.

Example:
    >>> strategy = distrib.MultiWorkerMirroredStrategy()     # reads TF_CONFIG
    >>> with strategy.scope():
    ...     model = torch.nn.Linear(4, 2)                      # identical on all workers
    ...     opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> def step(x, y):
    ...     loss = distrib.nn.compute_average_loss(((model(x) - y) ** 2).sum(1))
    ...     loss.backward(); opt.step(); opt.zero_grad()      # gradients summed across workers
    ...     return loss
    >>> total = strategy.reduce(distrib.ReduceOp.SUM, strategy.run(step, (x, y)), axis=None)
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple

import torch

from distrib.comm.collective import Collective, LocalCollective
from distrib.comm.elastic_abilities import elastic_abilities
from distrib.comm.options import CommunicationOptions
from distrib.hooks import install_excepthook
from distrib.data.distribution.input_context import InputPlacement
from distrib.data.distribution import batch_position
from distrib.strategies import context
from distrib.strategies.local_replicas import replica_process
from distrib.strategies.cross_replica import gather_values, reduce_values
from distrib.strategies.interface import Strategy
from distrib.strategies.local_replicas.connect import LocalReplicas
from distrib.strategies.per_replica import PerReplica
from distrib.strategies.replication import ScopeTracker
from distrib.utils.host_allocator import tune_host_allocator
from distrib.utils.nest import map_structure

__all__ = ["ReplicatedStrategy", "Strategy"]


class ReplicatedStrategy(Strategy):
    """One process per replica, replicas kept in step by a collective.

    Subclasses only choose the collective, the device and the cluster
    resolver they pass here; they do not subclass one another.
    """

    def __init__(
        self,
        *,
        collective: Optional[Collective] = None,
        device: Optional[torch.device] = None,
        cluster_resolver: Any = None,
        communication_options: Optional[CommunicationOptions] = None,
    ) -> None:
        install_excepthook()
        tune_host_allocator()
        self._collective = collective or LocalCollective()
        self._elastic = elastic_abilities(self._collective)  # None for a fixed-size job
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        self._cluster_resolver = cluster_resolver
        self._communication_options = communication_options or CommunicationOptions()
        self._tracker = ScopeTracker(self)
        self._grad_sync = None
        self._local_results: Any = None
        if self._collective.distributed:
            from distrib.comm.optimizer_hook import install

            context.register_job_strategy(self)
            install(self)

    # ----------------------------------------------------------- identity
    @property
    def num_replicas_in_sync(self) -> int:
        """Replicas that take each synchronous step together."""
        return self._collective.world_size

    @property
    def replica_id(self) -> int:
        """This process's replica index (0 is on the chief)."""
        return self._collective.rank

    @property
    def cluster_resolver(self) -> Any:
        """The resolver describing the job (``task_type``, ``task_id``, ``cluster_spec()``)."""
        return self._cluster_resolver

    @property
    def collective(self) -> Collective:
        return self._collective

    @property
    def device(self) -> torch.device:
        """The device this replica computes on."""
        return self._device

    @property
    def communication_options(self) -> CommunicationOptions:
        return self._communication_options

    @property
    def is_chief(self) -> bool:
        """True on the task that writes checkpoints, summaries and progress."""
        r = self._cluster_resolver
        if r is None:  # default / one-device: in a local-replica process, replica 0 only
            return replica_process.writes_side_effects()
        return bool(getattr(r, "is_chief", True))

    def barrier(self) -> None:
        """Wait until every replica reaches this point (every local-replica process, for a one-replica strategy)."""
        self._collective.barrier()
        if self._collective.world_size == 1:
            replica_process.settle()

    # -------------------------------------------------------------- scope
    @contextlib.contextmanager
    def scope(self) -> Iterator["ReplicatedStrategy"]:
        """Make this the current strategy; modules and optimizers created inside are distributed.

        Scopes nest; leaving restores the previous strategy. Parameters and
        buffers registered inside are placed on `device` and (multi-worker)
        made identical on every replica when the scope closes or the first
        `run`/optimizer step needs them.
        """
        with self._tracker.scope():
            yield self

    def track_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Adopt a module created outside `scope()`: place it, sync it, sum its gradients."""
        self._tracker.track_module(module)
        if not context.has_strategy() or context.current_scope_strategy() is not self:
            self._tracker.synchronize()
        return module

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally (no communication) inside this block.

        Example (gradient accumulation over 4 micro-batches, one exchange):
            >>> for mb in micro_batches[:-1]:
            ...     with strategy.no_sync():
            ...         loss_fn(mb).backward()
            >>> loss_fn(micro_batches[-1]).backward(); opt.step()
        """
        sync = self._grad_sync
        if sync is None:
            yield
            return
        previous, sync.enabled = sync.enabled, False
        try:
            yield
        finally:
            sync.enabled = previous

    def _gradient_synchronizer(self):
        """The strategy's `GradientSynchronizer`, created on first use."""
        if self._grad_sync is None:
            from distrib.comm.grad_sync import GradientSynchronizer
            from distrib.comm.state_sync import StateAverager

            opts = self._communication_options
            self._grad_sync = GradientSynchronizer(
                self._collective, bucket_cap_mb=opts.bucket_cap_mb, compression=opts.gradient_compression,
                state=StateAverager(self._collective, self.comm_device))
        return self._grad_sync

    # ---------------------------------------------------------------- run
    def run(self, fn: Callable, args: Sequence = (), kwargs: Optional[dict] = None) -> Any:
        """Run ``fn(*args, **kwargs)`` as this process's replica; returns its (per-replica) result.

        Tensors in ``args``/``kwargs`` are moved to the replica's device.
        """
        elastic = self._elastic
        if elastic is not None:
            elastic.step_boundary()
        self._tracker.synchronize()
        if self._grad_sync is not None:
            self._grad_sync.register_hooks()  # parameters unfrozen since the last step
        position = batch_position.find((args, kwargs))  # the batch's rows in its global batch, if known
        args = map_structure(self._to_device, tuple(args))
        kwargs = map_structure(self._to_device, dict(kwargs or {}))
        batch_position.set_current(position)
        with context.replica_context(self):
            result = fn(*args, **kwargs)
        if elastic is not None:
            elastic.step_end()  # workers may leave the job here (an agreed step boundary)
        return result

    def _to_device(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.device != self._device:
            return value.to(self._device, non_blocking=True)
        return value

    # ------------------------------------------------------------- reduce
    def reduce(self, reduce_op: Any, value: Any, axis: Optional[int] = None) -> Any:
        """Combine a per-replica ``value`` across replicas; the result is on every replica.

        ``axis=None`` combines replica values element-wise. With an ``axis``,
        each replica's value is first summed along it, so MEAN is the mean over
        *all* elements of all replicas along that axis (uneven sizes weigh right).

        Example (2 replicas holding [1, 2] and [3]):
            reduce(SUM, v, axis=0) -> 6 ; reduce(MEAN, v, axis=0) -> 2.0
        """
        return reduce_values(self._collective, self.comm_device, self.num_replicas_in_sync,
                             reduce_op, value, axis)

    def gather(self, value: Any, axis: int = 0) -> Any:
        """Concatenate every replica's ``value`` along ``axis`` in replica order (sizes may differ)."""
        return gather_values(self._collective, self.comm_device, value, axis)

    def experimental_local_results(self, value: Any) -> Tuple[Any, ...]:
        """One value per local replica of this task, in local replica order.

        With several local replicas (``MirroredStrategy(["cpu:0", "cpu:1"])``,
        ``DISTRIB_LOCAL_DEVICES``) they are gathered from the task's other
        replica processes, so every local replica must call this, as every
        replica runs the same program; with one it is ``(value,)``, no exchange.

        Example (Mirrored, 2 devices, global batch [0..7] times 10):
            >>> strategy.experimental_local_results(strategy.run(lambda x: x * 10, (x,)))
            (tensor([0, 10, 20, 30]), tensor([40, 50, 60, 70]))
        """
        if isinstance(value, PerReplica):
            return value.values
        if self._collective.world_size <= 1 or self.input_placement().num_local_replicas == 1:
            return (value,)
        if self._local_results is None:
            from distrib.strategies.local_replicas.local_results import LocalResults

            self._local_results = LocalResults(self.input_placement(), self._communication_options.timeout)
        return self._local_results.gather(value)

    @property
    def comm_device(self) -> torch.device:
        """Where tensors must be to take part in this strategy's collectives."""
        backend = self._communication_options.backend_for(self._device)
        return self._device if backend == "nccl" else torch.device("cpu")

    # -------------------------------------------------------------- input
    def input_placement(self) -> InputPlacement:
        """This replica's task pipeline and local index (one pipeline per task, as in TF)."""
        n, rid = self.num_replicas_in_sync, self.replica_id
        local = self._cluster_resolver.count if isinstance(self._cluster_resolver, LocalReplicas) else 1
        if n <= 1 or local <= 1 or n % local:
            return InputPlacement(num_input_pipelines=n, input_pipeline_id=rid)
        return InputPlacement(num_input_pipelines=n // local, input_pipeline_id=rid // local,
                              num_local_replicas=local, local_replica_id=rid % local)

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """Split each *global* batch of ``dataset`` among the replicas (one pipeline per task, as in TF)."""
        from distrib.data.distribution.distributed import distribute_dataset

        return distribute_dataset(self, dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable, options: Any = None) -> Any:
        """Call ``dataset_fn(input_context)`` once per task; its batches go to the task's replicas in turn."""
        from distrib.data.distribution.distributed import distribute_from_function

        return distribute_from_function(self, dataset_fn, options)

