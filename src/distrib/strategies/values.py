"""`experimental_distribute_values_from_function`: one value per replica, computed by the user.

``value_fn(ctx)`` is called once for each replica this process runs, with a
`ValueContext` saying which replica it is. The result goes to `Strategy.run`
like a distributed batch: each replica receives its own value.

Example (2 replicas):
    >>> def value_fn(ctx):
    ...     return torch.tensor([ctx.replica_id_in_sync_group] * 2)
    >>> values = strategy.experimental_distribute_values_from_function(value_fn)
    >>> strategy.experimental_local_results(strategy.run(lambda v: v * 10, (values,)))
    (tensor([0, 0]),)      # replica 0's process; replica 1 sees (tensor([10, 10]),)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from distrib.strategies.per_replica import PerReplica

__all__ = ["ValueContext", "distribute_values"]


@dataclass(frozen=True)
class ValueContext:
    """What ``value_fn`` learns about the replica it computes a value for (tf.distribute's names)."""

    replica_id_in_sync_group: int = 0
    num_replicas_in_sync: int = 1


def distribute_values(value_fn: Callable[[ValueContext], Any], replica_ids: Sequence[int],
                      num_replicas: int) -> Any:
    """``value_fn`` for each replica of ``replica_ids``: a plain value for one, a `PerReplica` for several."""
    if not callable(value_fn):
        raise TypeError(f"experimental_distribute_values_from_function needs a function of a ValueContext, "
                        f"got a {type(value_fn).__name__}")
    values = tuple(value_fn(ValueContext(int(r), int(num_replicas))) for r in replica_ids)
    return values[0] if len(values) == 1 else PerReplica(values)
