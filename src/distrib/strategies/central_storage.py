"""`CentralStorageStrategy`: parameters in one place, computation replicated in one process.

Parameters (and buffers) of modules created in the scope live on the
parameter device (the CPU by default). `run(fn, args)` splits every tensor
argument along its first dimension into one part per compute device and
calls ``fn`` once per part, in order, with the parameters copied to that
replica's device; each replica's gradients are collected onto the central
parameters, and the optimizer step inside ``fn`` is held back until the last
replica, so it applies the sum of all replicas' gradients once — the step one
process takes on the whole batch. With one compute device it behaves like
`OneDeviceStrategy`.

Keep ``optimizer.zero_grad()`` either before ``backward`` or after
``optimizer.step()`` inside ``fn`` (both usual spellings); a ``zero_grad``
between a replica's backward and a step that is not in ``fn`` would discard
that replica's gradients.

Example:
    >>> strategy = distrib.experimental.CentralStorageStrategy(["cpu:0", "cpu:1"])
    >>> strategy.num_replicas_in_sync
    2
    >>> losses = strategy.run(step_fn, args=(x_global, y_global))   # PerReplica of 2
    >>> strategy.reduce(distrib.ReduceOp.SUM, losses, axis=None)
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from distrib import hooks
from distrib.comm.collective import Collective, LocalCollective
from distrib.comm.options import CommunicationOptions
from distrib.data.distribution.input_context import InputBinding, InputPlacement
from distrib.data.structure import empty_from_spec, loosen_batch, spec_of
from distrib.hooks import install_excepthook
from distrib.strategies import context
from distrib.strategies.cross_replica import gather_values, reduce_values
from distrib.strategies.interface import Strategy
from distrib.strategies.devices import parse_replica_device
from distrib.strategies.per_replica import PerReplica
from distrib.strategies.replication import ScopeTracker
from distrib.utils.host_allocator import tune_host_allocator
from distrib.utils.nest import map_structure

__all__ = ["CentralStorageStrategy"]


class CentralStorageStrategy(Strategy):
    """One process; parameters on ``parameter_device``, replicas on ``compute_devices``."""

    supported_task_types = ("chief", "worker")

    def __init__(self, compute_devices: Optional[Sequence[Any]] = None,
                 parameter_device: Optional[Any] = None) -> None:
        if compute_devices is None:
            compute_devices = ([f"cuda:{i}" for i in range(torch.cuda.device_count())]
                               if torch.cuda.is_available() else ["cpu:0"])
        if not compute_devices:
            raise ValueError("CentralStorageStrategy(compute_devices=[]) needs at least one device")
        install_excepthook()
        tune_host_allocator()
        self._compute = [parse_replica_device(d)[1] for d in compute_devices]
        if parameter_device is None:
            parameter_device = "cpu" if len(self._compute) > 1 else self._compute[0]
        self._device = parse_replica_device(parameter_device)[1]
        self._collective = LocalCollective()
        self._communication_options = CommunicationOptions()
        self._tracker = ScopeTracker(self)
        self._local_id = 0

    # ----------------------------------------------------------- identity
    @property
    def num_replicas_in_sync(self) -> int:
        return len(self._compute)

    @property
    def replica_id(self) -> int:
        """The replica running now inside `run` (0 outside it)."""
        return self._local_id

    @property
    def cluster_resolver(self) -> None:
        """None: the strategy is one process, whatever cluster it runs in."""
        return None

    @property
    def is_chief(self) -> bool:
        return True

    @property
    def device(self) -> torch.device:
        """The parameter device: where the central parameters live."""
        return self._device

    @property
    def collective(self) -> Collective:
        """A local collective: every replica is in this process."""
        return self._collective

    @property
    def communication_options(self) -> CommunicationOptions:
        return self._communication_options

    @property
    def comm_device(self) -> torch.device:
        """Where reductions happen: the parameter device when it is a GPU, else the CPU."""
        nccl = self._communication_options.backend_for(self._device) == "nccl"
        return self._device if nccl else torch.device("cpu")

    @property
    def compute_devices(self) -> List[torch.device]:
        return list(self._compute)

    # -------------------------------------------------------------- scope
    @contextlib.contextmanager
    def scope(self) -> Iterator["CentralStorageStrategy"]:
        """Parameters and buffers registered inside are created on the parameter device."""
        with self._tracker.scope():
            yield self

    def track_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Adopt a module created outside `scope()`: move it to the parameter device."""
        self._tracker.track_module(module)
        self._tracker.synchronize()
        return module

    # ------------------------------------------------------------- reduce
    def reduce(self, reduce_op: Any, value: Any, axis: Optional[int] = None) -> Any:
        """Combine the replicas' values (a `PerReplica` from `run`); see `distrib.Strategy.reduce`."""
        return reduce_values(self._collective, self.comm_device, self.num_replicas_in_sync,
                             reduce_op, value, axis)

    def gather(self, value: Any, axis: int = 0) -> Any:
        """The replicas' values concatenated along ``axis`` in replica order."""
        return gather_values(self._collective, self.comm_device, value, axis)

    def experimental_local_results(self, value: Any) -> Tuple[Any, ...]:
        """Every replica's value: all replicas are local."""
        return self.own_results(value)

    # ---------------------------------------------------------------- run
    def run(self, fn: Callable, args: Sequence = (), kwargs: Optional[dict] = None) -> Any:
        self._tracker.synchronize()
        k = len(self._compute)
        if k == 1:
            args = map_structure(lambda v: _to(v, self._compute[0]), tuple(args))
            kwargs = map_structure(lambda v: _to(v, self._compute[0]), dict(kwargs or {}))
            with context.replica_context(self):
                return fn(*args, **kwargs)
        params = self._tracker.tracked_parameters()
        results = []
        with _HeldBackSteps(params, self._device) as held:
            for i, device in enumerate(self._compute):
                self._local_id = i
                held.begin_replica(device, last=(i == k - 1))
                a = map_structure(lambda v: _to(_part(v, i, k), device), tuple(args))
                kw = map_structure(lambda v: _to(_part(v, i, k), device), dict(kwargs or {}))
                try:
                    with context.replica_context(self):
                        results.append(fn(*a, **kw))
                finally:
                    held.end_replica()
        self._local_id = 0
        return PerReplica(tuple(results))

    def _replicas_in_process(self) -> Tuple[int, ...]:
        return tuple(range(self.num_replicas_in_sync))

    # -------------------------------------------------------------- input
    def input_placement(self) -> InputPlacement:
        """One input pipeline; the replica running now inside `run` (0 outside it) is the local one."""
        return InputPlacement(num_local_replicas=self.num_replicas_in_sync, local_replica_id=self._local_id)

    def _whole_batches(self) -> InputBinding:
        """The input layer's view: one process taking whole global batches (`run` splits them)."""
        return InputBinding(InputPlacement(), self._collective, self._device, context=self.input_context())

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """Whole global batches; `run` splits them among the replicas."""
        from distrib.data.distribution.distributed import distribute_dataset

        return distribute_dataset(self._whole_batches(), dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable, options: Any = None) -> Any:
        """The function's per-replica batches, K at a time: one `PerReplica` per tensor, for `run`."""
        from distrib.data.distribution.distributed import distribute_from_function

        per_replica = distribute_from_function(self._whole_batches(), dataset_fn, options)
        return _JoinedBatches(per_replica, self.num_replicas_in_sync)


def _part(value: Any, i: int, k: int) -> Any:
    if isinstance(value, PerReplica):
        return value.values[i]
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return torch.tensor_split(value, k, dim=0)[i]
    return value


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor) and value.device != device:
        return value.to(device)
    return value


class _HeldBackSteps(contextlib.AbstractContextManager):
    """Collects each replica's gradients centrally and lets only the last replica step."""

    def __init__(self, params: List[torch.nn.Parameter], central: torch.device) -> None:
        self._params = params
        self._central_data = {id(p): p.data for p in params}
        self._central = central
        self._stash: Dict[int, torch.Tensor] = {}
        self._last = False
        self._device = central
        self._hook = None

    def __enter__(self):
        self._hook = hooks.optimizer_step_pre_hook(self._before_step)
        return self

    def __exit__(self, *exc) -> None:
        self._hook.remove()
        for p in self._params:
            p.data = self._central_data[id(p)]
            stashed = self._stash.pop(id(p), None)
            if stashed is not None:
                p.grad = stashed if p.grad is None else p.grad.to(self._central) + stashed

    def begin_replica(self, device: torch.device, last: bool) -> None:
        self._last, self._device = last, device
        if device != self._central:
            for p in self._params:
                p.data = self._central_data[id(p)].to(device)

    def end_replica(self) -> None:
        if not self._last:
            self._harvest()

    def _harvest(self) -> None:
        for p in self._params:
            if p.grad is not None:
                g = p.grad.detach().to(self._central)
                prev = self._stash.get(id(p))
                self._stash[id(p)] = g if prev is None else prev + g
                p.grad = None

    def _before_step(self, optimizer, args, kwargs) -> None:
        if not self._last:
            self._harvest()  # nothing left to step for this replica: the last one steps for all
            return
        for p in self._params:
            p.data = self._central_data[id(p)]
            stashed = self._stash.pop(id(p), None)
            if p.grad is not None:
                p.grad = p.grad.detach().to(self._central)
            if stashed is not None:
                p.grad = stashed if p.grad is None else p.grad + stashed


class _JoinedBatches:
    """Iterates K per-replica batches at a time, as one structure of `PerReplica` leaves.

    `run` hands replica ``i`` its own batch, as TF does; when the function's
    data ends within a step the remaining replicas get empty batches.
    """

    def __init__(self, dataset: Any, k: int) -> None:
        self._dataset = dataset
        self._k = k

    def __iter__(self):
        it = iter(self._dataset)
        while True:
            parts = []
            for _ in range(self._k):
                try:
                    parts.append(next(it))
                except StopIteration:
                    break
            if not parts:
                return
            if len(parts) < self._k:
                empty = empty_from_spec(loosen_batch(spec_of(parts[0])))
                parts.extend(empty for _ in range(self._k - len(parts)))
            yield _per_replica_leaves(parts)


def _per_replica_leaves(parts: List[Any]) -> Any:
    first = parts[0]
    if isinstance(first, dict):
        return {k: _per_replica_leaves([p[k] for p in parts]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(_per_replica_leaves([p[i] for p in parts]) for i in range(len(first)))
    return PerReplica(tuple(parts))
