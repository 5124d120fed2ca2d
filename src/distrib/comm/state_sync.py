"""Averaging of non-trainable state across replicas after each synchronous step.

Trainable parameters stay identical because every replica steps them with the
same summed gradient. Other floating state — BatchNorm running statistics
computed from a local batch, Keras 3's non-trainable variables (moving mean
and variance are ``requires_grad=False`` parameters), any buffer a module
updates in ``forward`` — would drift apart. tf.distribute keeps such
variables per replica and reads them averaged (aggregation MEAN); distrib
averages them in place once per step, so every replica holds the mean.

Only tensors that may have changed are sent: each step the replicas agree,
with one small MAX all-reduce of a flag per tensor (skipped when every watched
tensor is a buffer), which tensors any replica modified, then sum those in one message per dtype and divide by the number
of replicas. Buffers always count as modified (torch's BatchNorm kernels
update running statistics without bumping the in-place version counter);
frozen parameters count when their version counter moved, so a frozen
backbone costs one flag per tensor and a Keras moving mean is sent.

Example (2 replicas whose local batches gave running means 1.0 and 3.0):
    after the step both hold 2.0
"""
from __future__ import annotations

import weakref
from typing import Dict, List, Set

import torch

from distrib.comm.collective import Collective, ReduceOp

__all__ = ["StateAverager"]


class StateAverager:
    """Keeps the non-trainable floating tensors it is given equal to their mean across replicas."""

    def __init__(self, collective: Collective, comm_device: torch.device) -> None:
        self._collective = collective
        self._comm_device = comm_device
        self._tensors: "List[weakref.ref[torch.Tensor]]" = []
        self._ids: Set[int] = set()
        self._excluded: Set[int] = set()
        self._seen: Dict[int, int] = {}  # id(tensor) -> version at the last average

    def add(self, tensors: List[torch.Tensor]) -> None:
        """Watch ``tensors`` (non-floating ones are ignored); same order on every replica."""
        for t in tensors:
            if t.is_floating_point() and id(t) not in self._ids:
                self._ids.add(id(t))
                self._tensors.append(weakref.ref(t))
                self._seen[id(t)] = t._version

    def exclude(self, tensors: List[torch.Tensor]) -> None:
        """Never average ``tensors`` (e.g. statistics already computed on the global batch)."""
        self._excluded.update(id(t) for t in tensors)

    def _candidates(self) -> List[torch.Tensor]:
        alive = [t for t in (r() for r in self._tensors) if t is not None]
        return [t for t in alive if not t.requires_grad and id(t) not in self._excluded]

    def _changed(self, t: torch.Tensor) -> bool:
        # torch's batch_norm updates running statistics without bumping the version
        # counter, so buffers always count as changed; parameters (Keras's variables) do bump it.
        return not isinstance(t, torch.nn.Parameter) or t._version != self._seen.get(id(t))

    def average_changed(self) -> int:
        """Average every watched tensor any replica modified since the last call (collective).

        Returns:
            How many tensors were averaged.
        """
        candidates = self._candidates()
        if not candidates:
            return 0
        if any(isinstance(t, torch.nn.Parameter) for t in candidates):
            flags = torch.tensor([float(self._changed(t)) for t in candidates], device=self._comm_device)
            flags = self._collective.all_reduce(flags, ReduceOp.MAX)
            changed = [t for t, f in zip(candidates, flags.tolist()) if f > 0]
        else:  # buffers always count as changed: every replica knows the answer, nothing to agree on
            changed = candidates
        by_dtype: Dict[torch.dtype, List[torch.Tensor]] = {}
        for t in changed:
            by_dtype.setdefault(t.dtype, []).append(t)
        n = self._collective.world_size
        with torch.no_grad():
            for group in by_dtype.values():
                flat = torch.cat([t.detach().reshape(-1).to(self._comm_device) for t in group])
                flat = self._collective.all_reduce(flat, ReduceOp.SUM) / n
                offset = 0
                for t in group:
                    t.detach().copy_(flat[offset:offset + t.numel()].view_as(t))
                    offset += t.numel()
        for t in candidates:
            self._seen[id(t)] = t._version
        return len(changed)
