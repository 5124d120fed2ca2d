"""Several workers in one process, on threads: a real collective for tests and examples.

A test double (it used to be ``distrib.data.simulated``): the input code
under test never imports it.

`run_workers(fn, n)` calls ``fn(strategy)`` on ``n`` threads, each with a
`SimulatedStrategy` whose `ThreadCollective` really synchronises with the
others (a barrier with a timeout, so a missing call is an error, not a hang).
It exercises the distributed input code paths (seed agreement, end-of-data
agreement) without processes; `calls` counts collectives per kind.

Example:
    >>> ds = Dataset.range(10).batch(4)
    >>> run_workers(lambda s: [b.tolist() for b in s.experimental_distribute_dataset(ds)], 2)
    [[[0, 1], [4, 5], [8]], [[2, 3], [6, 7], [9]]]
"""
from __future__ import annotations

import collections
import threading
from typing import Any, Callable, List, Optional, Tuple

import torch

from distrib.comm.collective import Collective, ReduceOp
from distrib.data.distribution.input_context import InputContext, InputPlacement

__all__ = ["ThreadCollective", "SimulatedStrategy", "run_workers"]


class _Group:
    def __init__(self, size: int, timeout: float) -> None:
        self.size = size
        self.barrier = threading.Barrier(size, timeout=timeout)
        self.slots: List[Any] = [None] * size

    def exchange(self, rank: int, value: Any) -> List[Any]:
        self.slots[rank] = value
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()  # nobody writes the next round before everyone has read this one
        return out


class ThreadCollective(Collective):
    """One rank of a collective whose members are threads of this process."""

    def __init__(self, group: _Group, rank: int) -> None:
        self._group, self._rank = group, rank
        self.calls: collections.Counter = collections.Counter()

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._group.size

    def _exchange(self, kind: str, value: Any) -> List[Any]:
        self.calls[kind] += 1
        return self._group.exchange(self._rank, value)

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> torch.Tensor:
        parts = torch.stack(self._exchange("all_reduce", tensor.detach().clone()))
        if op is ReduceOp.SUM:
            return parts.sum(0)
        if op is ReduceOp.MEAN:
            return parts.sum(0) / len(parts)
        return parts.amax(0) if op is ReduceOp.MAX else parts.amin(0)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        return self._exchange("broadcast", tensor.detach().clone())[src].clone()

    def all_gather(self, tensor: torch.Tensor) -> List[torch.Tensor]:
        return [t.clone() for t in self._exchange("all_gather", tensor.detach().clone())]

    def barrier(self) -> None:
        self._exchange("barrier", None)


class SimulatedStrategy:
    """The strategy attributes distributed input needs, over a `ThreadCollective`.

    ``local_replicas`` > 1 groups consecutive ranks into tasks of that many
    local replicas sharing one input pipeline, as Mirrored devices do.
    """

    def __init__(self, collective: Collective, device: Any = "cpu", local_replicas: int = 1) -> None:
        self.collective = collective
        self.device = torch.device(device)
        if local_replicas < 1 or collective.world_size % local_replicas:
            raise ValueError(f"SimulatedStrategy: {collective.world_size} replicas do not form tasks "
                             f"of {local_replicas} local replicas")
        self._local = local_replicas

    @property
    def num_replicas_in_sync(self) -> int:
        return self.collective.world_size

    @property
    def multi_replica(self) -> bool:
        return self.collective.world_size > 1

    @property
    def replica_id(self) -> int:
        return self.collective.rank

    def input_placement(self) -> InputPlacement:
        d = self._local
        return InputPlacement(self.num_replicas_in_sync // d, self.replica_id // d, d, self.replica_id % d)

    def input_context(self) -> InputContext:
        return self.input_placement().input_context()

    def experimental_local_results(self, value: Any) -> Tuple[Any, ...]:
        """Every local replica's ``value`` (gathered over the whole thread group, then filtered)."""
        if self._local == 1:
            return (value,)
        everyone = self.collective._exchange("local_results", value)  # type: ignore[attr-defined]
        return tuple(everyone[r] for r in self.input_placement().local_ranks)

    def run(self, fn: Callable, args: Any = (), kwargs: Any = None) -> Any:
        """``fn(*args, **kwargs)`` as this thread's replica."""
        return fn(*args, **(kwargs or {}))

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        from distrib.data.distribution.distributed import distribute_dataset

        return distribute_dataset(self, dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable, options: Any = None) -> Any:
        from distrib.data.distribution.distributed import distribute_from_function

        return distribute_from_function(self, dataset_fn, options)


def run_workers(fn: Callable[[SimulatedStrategy], Any], num_workers: int,
                timeout: float = 60.0, local_replicas: int = 1) -> List[Any]:
    """``[fn(strategy_0), ..., fn(strategy_{n-1})]``, run concurrently on threads.

    ``num_workers`` counts replicas; ``local_replicas`` groups them into tasks.

    A worker that raises breaks the barrier, so the others fail fast too; the
    first error is re-raised here.
    """
    group = _Group(num_workers, timeout)
    results: List[Any] = [None] * num_workers
    errors: List[Optional[BaseException]] = [None] * num_workers

    def body(rank: int) -> None:
        try:
            results[rank] = fn(SimulatedStrategy(ThreadCollective(group, rank), local_replicas=local_replicas))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors[rank] = exc
            group.barrier.abort()

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(num_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * 4)
    first = next((e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)),
                 next((e for e in errors if e is not None), None))
    if first is not None:
        raise first
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"a simulated worker did not finish within {timeout * 4:.0f} s")
    return results
