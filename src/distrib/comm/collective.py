"""The collective interface every strategy talks through.

A `Collective` connects the replicas of one job. `LocalCollective` is the
one-replica case (everything is the identity); `distrib.comm.torch_collective`
implements it over ``torch.distributed``.

All methods are collective: every replica must call them in the same order.

Example:
    >>> c = LocalCollective()
    >>> c.all_reduce(torch.tensor([1.0, 2.0]), ReduceOp.SUM)
    tensor([1., 2.])
    >>> c.broadcast_json({"seed": 7})
    {'seed': 7}
"""
from __future__ import annotations

import abc
import enum
import json
from typing import Any, List, Optional

import torch

from distrib.comm.step_flag import StepFlag

__all__ = ["ReduceOp", "Collective", "LocalCollective"]


class ReduceOp(enum.Enum):
    """How values from all replicas are combined (``distrib.ReduceOp``)."""

    SUM = "SUM"
    MEAN = "MEAN"
    MAX = "MAX"
    MIN = "MIN"


class Collective(abc.ABC):
    """Collective operations among the replicas of one job."""

    _step_flag: Optional[StepFlag] = None
    #: True for a collective whose membership can change while the job runs: one that is an
    #: `distrib.comm.elastic_abilities.ElasticAbilities` (the flag is what ``distrib.data`` reads).
    elastic: bool = False

    @property
    @abc.abstractmethod
    def rank(self) -> int:
        """This replica's index, 0..world_size-1 (0 is the chief's replica)."""

    @property
    @abc.abstractmethod
    def world_size(self) -> int:
        """The number of replicas in sync."""

    @property
    def distributed(self) -> bool:
        """Whether replicas exchange values through this collective: more than one replica, or an
        elastic job, which may grow from one (its one replica runs every collective a job of
        several runs, so a worker that joins later can replay its steps)."""
        return self.world_size > 1 or self.elastic

    @abc.abstractmethod
    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> torch.Tensor:
        """Combine ``tensor`` across replicas; returns the result (same shape)."""

    @abc.abstractmethod
    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Every replica gets ``src``'s tensor (in place where possible)."""

    @abc.abstractmethod
    def all_gather(self, tensor: torch.Tensor) -> List[torch.Tensor]:
        """One tensor from each replica, in rank order; first dims may differ."""

    @abc.abstractmethod
    def barrier(self) -> None:
        """Return once every replica has called it."""

    @property
    def step_flag(self) -> StepFlag:
        """The `StepFlag` whose value rides in this collective's gradient reductions."""
        if self._step_flag is None:
            self._step_flag = StepFlag()
        return self._step_flag

    def all_reduce_async(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> Any:
        """Start an in-place all-reduce of ``tensor``; `wait` on the handle before reading it."""
        result = self.all_reduce(tensor, op)
        if result is not tensor:  # an implementation that returns a new tensor
            tensor.copy_(result)
        return None

    def wait(self, handle: Any) -> None:
        """Block until an `all_reduce_async` handle completes."""

    def control_all_reduce(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> torch.Tensor:
        """A small all-reduce that never queues behind in-flight gradient buckets."""
        return self.all_reduce(tensor, op)

    def agree_any(self, flag: bool) -> bool:
        """True on every replica if ``flag`` is true on any replica."""
        t = torch.tensor([1.0 if flag else 0.0])
        return bool(self.all_reduce(t, ReduceOp.MAX).item() > 0)

    def control_broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """`broadcast` of a small CPU tensor, on the path reserved for control messages."""
        return self.broadcast(tensor, src)

    def control_all_gather(self, tensor: torch.Tensor) -> List[torch.Tensor]:
        """`all_gather` of a small CPU tensor, on the path reserved for control messages."""
        return self.all_gather(tensor)

    def broadcast_bytes(self, data: bytes, src: int = 0) -> bytes:
        """``src``'s bytes on every replica."""
        n = torch.tensor([len(data) if self.rank == src else 0], dtype=torch.int64)
        n = self.control_broadcast(n, src)
        buf = torch.zeros(int(n.item()), dtype=torch.uint8)
        if self.rank == src and len(data) and len(data) == len(buf):
            # (the sizes differ only where the size came from an elastic log: a replaced source that
            # replays takes the bytes it sent the first time from the log too)
            buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        buf = self.control_broadcast(buf, src)
        return bytes(buf.numpy().tobytes())

    def broadcast_json(self, obj: Any, src: int = 0) -> Any:
        """``src``'s JSON-serialisable object on every replica (never pickle)."""
        data = json.dumps(obj).encode() if self.rank == src else b""
        return json.loads(self.broadcast_bytes(data, src).decode())

    def all_gather_json(self, obj: Any) -> List[Any]:
        """Every replica's JSON-serialisable object, in rank order."""
        data = torch.frombuffer(bytearray(json.dumps(obj).encode()), dtype=torch.uint8)
        return [json.loads(bytes(t.numpy().tobytes()).decode()) for t in self.control_all_gather(data)]

    def apply_pending_resize(self) -> None:
        """Nothing here; an elastic collective (`distrib.comm.elastic_abilities.ElasticAbilities`) applies
        a resize agreed at the last step's end. The one ability kept on every collective: the input
        pipeline calls it before each step's input (``distrib.data``, left as it is by the restructuring
        that moved the others to `ElasticAbilities`)."""

    @property
    def closed(self) -> bool:
        """Whether `shutdown` ran (a collective that holds no connection never closes)."""
        return False

    def shutdown(self) -> None:
        """Release connections; the collective is unusable afterwards."""


class LocalCollective(Collective):
    """The collective of a single replica: every operation is the identity."""

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> torch.Tensor:
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> List[torch.Tensor]:
        return [tensor]

    def barrier(self) -> None:
        return None
