"""The `Strategy` base: scope, run, reduce, gather and distributed input.

A strategy is composed from a cluster resolver (who is in the job), a
`Collective` (how replicas talk) and a device (where this replica computes).
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

from distrib.hooks import install_excepthook
from distrib.comm.collective import Collective, LocalCollective, ReduceOp
from distrib.comm.options import CommunicationOptions
from distrib.data.input_context import InputContext, InputPlacement
from distrib.strategies import context
from distrib.strategies.local_replicas import LocalReplicas
from distrib.strategies.per_replica import PerReplica, combine_local
from distrib.strategies.replication import ScopeTracker
from distrib.utils.host_allocator import tune_host_allocator
from distrib.utils.nest import map_structure

__all__ = ["Strategy"]


class Strategy:
    """Base of every distribution strategy. Do not instantiate directly.

    Subclasses pass a collective, a device and a cluster resolver; they do not
    subclass one another.
    """

    #: Task types a strategy accepts in its cluster; others are an error.
    supported_task_types: Tuple[str, ...] = ("chief", "worker", "evaluator")

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
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        self._cluster_resolver = cluster_resolver
        self._communication_options = communication_options or CommunicationOptions()
        self._tracker = ScopeTracker(self)
        self._scope_depth = 0
        self._grad_sync = None
        self._local_results: Any = None
        if self._collective.world_size > 1:
            context.register_job_strategy(self)
            if getattr(self, "tracks_modules", True):
                from distrib.comm.optimizer_hook import install

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
        if r is None:
            return True
        return bool(getattr(r, "is_chief", True))

    @property
    def extended(self) -> "Strategy":
        """TF code reaches some attributes through ``strategy.extended``; here it is the strategy."""
        return self

    @property
    def should_checkpoint(self) -> bool:
        return self.is_chief

    # -------------------------------------------------------------- scope
    @contextlib.contextmanager
    def scope(self) -> Iterator["Strategy"]:
        """Make this the current strategy; modules and optimizers created inside are distributed.

        Scopes nest; leaving restores the previous strategy. Parameters and
        buffers registered inside are placed on `device` and (multi-worker)
        made identical on every replica when the scope closes or the first
        `run`/optimizer step needs them.
        """
        context.push(self)
        self._scope_depth += 1
        if self._scope_depth == 1:
            self._tracker.start_capture()
        try:
            yield self
        finally:
            self._scope_depth -= 1
            if self._scope_depth == 0:
                self._tracker.stop_capture()
            context.pop(self)
            if self._scope_depth == 0:
                self._tracker.synchronize()

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
        self._tracker.synchronize()
        if self._grad_sync is not None:
            self._grad_sync.register_hooks()  # parameters unfrozen since the last step
        args = map_structure(self._to_device, tuple(args))
        kwargs = map_structure(self._to_device, dict(kwargs or {}))
        with context.replica_context(self):
            return fn(*args, **kwargs)

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
        op = _as_reduce_op(reduce_op)
        return map_structure(lambda v: self._reduce_one(op, v, axis), _unwrap_structure(value))

    def _reduce_one(self, op: ReduceOp, value: Any, axis: Optional[int]) -> Any:
        t = torch.as_tensor(combine_local(value, op.value, axis))
        if not t.is_floating_point() and op is ReduceOp.MEAN:
            t = t.to(torch.float32)
        t = t.detach().to(self.comm_device)
        n = self.num_replicas_in_sync
        if axis is None:
            if op is ReduceOp.MEAN:
                return self._collective.all_reduce(t.clone(), ReduceOp.SUM) / n
            return self._collective.all_reduce(t.clone(), op)
        if op in (ReduceOp.SUM, ReduceOp.MEAN):
            packed = torch.cat([t.sum(dim=axis).reshape(-1).to(torch.float64),
                                torch.tensor([t.shape[axis]], dtype=torch.float64, device=t.device)])
            packed = self._collective.all_reduce(packed, ReduceOp.SUM)
            total = packed[:-1].reshape(t.sum(dim=axis).shape).to(t.dtype if op is ReduceOp.SUM else torch.float32)
            return total if op is ReduceOp.SUM else total / packed[-1].to(torch.float32)
        local = t.amax(dim=axis) if op is ReduceOp.MAX else t.amin(dim=axis)
        return self._collective.all_reduce(local.clone(), op)

    def gather(self, value: Any, axis: int = 0) -> Any:
        """Concatenate every replica's ``value`` along ``axis`` in replica order (sizes may differ)."""
        def one(v: Any) -> torch.Tensor:
            t = torch.as_tensor(combine_local(v, "SUM", axis)).detach().to(self.comm_device)
            if t.dim() == 0:
                t = t.reshape(1)
            moved = t.movedim(axis, 0).contiguous()
            parts = self._collective.all_gather(moved)
            return torch.cat(parts, 0).movedim(0, axis)
        return map_structure(one, _unwrap_structure(value))

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
            from distrib.strategies.local_results import LocalResults

            self._local_results = LocalResults(self.input_placement(), self._communication_options.timeout)
        return self._local_results.gather(value)

    def _own_results(self, value: Any) -> Tuple[Any, ...]:
        """The values this process itself holds (its replica's, or each replica's in one process)."""
        return value.values if isinstance(value, PerReplica) else (value,)

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

    def input_context(self) -> InputContext:
        """What ``distribute_datasets_from_function`` passes: one input pipeline per worker task."""
        return self.input_placement().input_context()

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """Split each *global* batch of ``dataset`` among the replicas (one pipeline per task, as in TF)."""
        from distrib.data.distributed import distribute_dataset

        return distribute_dataset(self, dataset, options)

    def experimental_distribute_values_from_function(self, value_fn: Callable) -> Any:
        """``value_fn(ValueContext)`` for each replica of this process, ready for `run`.

        See `distrib.strategies.values`; ``experimental_local_results`` of the
        result gives this task's replicas' values in order.
        """
        from distrib.strategies.values import distribute_values

        return distribute_values(value_fn, self._replicas_in_process(), self.num_replicas_in_sync)

    def _replicas_in_process(self) -> Tuple[int, ...]:
        """The replica ids whose code this process runs (one, except for CentralStorage)."""
        return (self.replica_id,)

    def distribute_datasets_from_function(self, dataset_fn: Callable, options: Any = None) -> Any:
        """Call ``dataset_fn(input_context)`` once per task; its batches go to the task's replicas in turn."""
        from distrib.data.distributed import distribute_from_function

        return distribute_from_function(self, dataset_fn, options)

    # ----------------------------------------------------------- lifecycle
    def barrier(self) -> None:
        self._collective.barrier()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_replicas_in_sync={self.num_replicas_in_sync}, "
                f"replica_id={self.replica_id}, device={self._device})")


def _unwrap_structure(value: Any) -> Any:
    """A `PerReplica` of structures becomes a structure of `PerReplica` leaves."""
    if not isinstance(value, PerReplica) or not value.values:
        return value
    first = value.values[0]
    if isinstance(first, dict):
        return {k: _unwrap_structure(PerReplica(tuple(v[k] for v in value.values))) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(_unwrap_structure(PerReplica(tuple(v[i] for v in value.values)))
                           for i in range(len(first)))
    return value


def _as_reduce_op(op: Any) -> ReduceOp:
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str) and op.upper() in ReduceOp.__members__:
        return ReduceOp[op.upper()]
    raise ValueError(f"reduce_op must be distrib.ReduceOp.SUM or MEAN (or MAX/MIN), got {op!r}")
