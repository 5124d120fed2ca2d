"""`CheckpointRole`: everything checkpoint code needs from a strategy.

A strategy builds it (`Strategy.checkpoint_role()`); `Checkpoint`,
`CheckpointManager`, `RNGState`, the preemption watcher and the write-path
helpers use nothing else of the strategy: who writes final paths (the
chief), where the other workers write (a private path named after their
task), and the collective through which they agree.

Example (worker 1 of a two-worker job; its saves go to a private path):
    >>> role = CheckpointRole(is_chief=False, num_replicas_in_sync=2, replica_id=1,
    ...                       collective=collective, task_type="worker", task_id=1)
    >>> role.writer_id, role.who
    (1, 'worker:1')
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from distrib.comm.collective import Collective, LocalCollective

__all__ = ["CheckpointRole", "SINGLE_PROCESS"]


@dataclass(frozen=True)
class CheckpointRole:
    """Who writes checkpoints, where the others write, and how they agree.

    Args:
        is_chief: this process writes the final paths.
        num_replicas_in_sync: replicas that must all take part in a collective save.
        replica_id: this process's replica (ranks the gathered RNG states).
        collective: how replicas agree (errors, the latest checkpoint, RNG states).
        comm_device: where tensors must be to travel through ``collective``.
        task_type: this task's type in the cluster (None without a cluster).
        task_id: this task's index (None without a cluster).
    """

    is_chief: bool
    num_replicas_in_sync: int
    replica_id: int
    collective: Collective = field(compare=False)
    comm_device: torch.device = torch.device("cpu")
    task_type: Optional[str] = None
    task_id: Optional[int] = None

    @property
    def multi_replica(self) -> bool:
        """Whether saving and restoring take the multi-replica path (see `Strategy.multi_replica`)."""
        return self.num_replicas_in_sync > 1 or self.collective.elastic

    @property
    def writer_id(self) -> int:
        """Names a non-chief's private write path: its task id, else its replica id."""
        return self.task_id if self.task_id is not None else self.replica_id

    @property
    def who(self) -> str:
        """This process in an error message, e.g. ``'worker:1'`` or ``'replica 3'``."""
        if self.task_type is not None:
            return f"{self.task_type}:{self.task_id}"
        return f"replica {self.replica_id}"


#: The role of a single process with no job around it.
SINGLE_PROCESS = CheckpointRole(is_chief=True, num_replicas_in_sync=1, replica_id=0,
                                collective=LocalCollective())
