"""Bucketed gradient all-reduce that overlaps the backward pass.

Parameters are grouped, in reverse registration order (the order backward
produces their gradients), into flat buckets of about ``bucket_cap_mb``; the
first bucket closes at 1 MiB, so the last layers' gradients start travelling
while backward still works on the early layers. When
the last gradient of a bucket has been accumulated, the bucket is copied into
its preallocated flat buffer and an asynchronous all-reduce (SUM) starts while
backward goes on. Buckets are launched strictly in index order, so every
replica issues the same sequence of collectives. `finish` (run by a global
optimizer step pre-hook) launches the buckets that are still waiting, waits
for all of them and writes the summed gradients back; then the optional
`StateAverager` averages the non-trainable state this step changed.

Each bucket carries one extra element per parameter, 1 where this replica
has a gradient: after the reduce, a parameter no replica produced a gradient
for keeps ``grad is None`` (so optimizers skip it, as they would in one
process), at no extra message. A parameter accumulated twice before a step
(gradient accumulation) is reduced again from its accumulated value, which
stays correct; `Strategy.no_sync()` skips communication entirely.

Frozen parameters (``requires_grad=False``) are in no bucket and carry no
hook (torch refuses hooks on them). Bucket membership is decided from the
``requires_grad`` flags of all registered parameters — flags every replica
of an SPMD program agrees on — and re-decided at the first gradient of a step
when they changed, so a parameter unfrozen between steps is summed from its
first step on. Its hook is registered after the next step (or when
`Strategy.run` starts); until then its bucket is sent by `finish`. A
parameter that becomes trainable in the middle of a step (after the layout
was fixed) is summed by `finish` in one extra message, in registration order.

The last bucket has one more element: the collective's `StepFlag` (an
"any replica?" flag such as a preemption notice), so a decision every step
must agree on travels with the step's gradients instead of in a message of
its own.

Example (2 replicas with gradients [1, 2] and [3, 4] for one parameter):
    after backward + optimizer.step(): both replicas stepped with grad [4, 6]
"""
from __future__ import annotations

import threading
import weakref
from typing import Callable, Dict, List, Optional

import torch

from distrib.comm.collective import ReduceOp
from distrib.comm.elastic_abilities import ReductionLog
from distrib.comm.optimizer_hook import register_parameters
from distrib.comm.state_sync import StateAverager
from distrib.comm.step_flag import StepFlag

__all__ = ["GradientSynchronizer"]

_FIRST_BUCKET_BYTES = 1024 * 1024
_WIRE_DTYPES = {None: None, "bf16": torch.bfloat16, "fp16": torch.float16}


class _Bucket:
    __slots__ = ("params", "numels", "buffer", "views", "flags", "step_flag", "ready", "pending", "handle",
                 "dirty", "index", "complete", "spares", "_dtype")

    def __init__(self, index: int, params: List[torch.nn.Parameter], wire_dtype: Optional[torch.dtype],
                 step_flag: Optional[StepFlag] = None) -> None:
        self.index = index
        self.params = params
        self.step_flag = step_flag  # carried in this bucket's last elements, if given
        self._dtype = wire_dtype or params[0].dtype
        self.spares: List[tuple] = []  # other (buffer, views, flags) while a collective keeps the current one
        self.buffer, self.views, self.flags = self._allocate(torch.zeros)
        self.ready = [False] * len(params)
        self.pending = len(params)
        self.handle = None
        self.dirty = False
        self.complete = False  # every parameter had a gradient here at the last launch

    def _allocate(self, make: Callable[..., torch.Tensor] = torch.empty) -> tuple:
        total = sum(p.numel() for p in self.params)
        extra = self.step_flag.width if self.step_flag is not None else 0
        buffer = make(total + len(self.params) + extra, dtype=self._dtype, device=self.params[0].device)
        views = []
        offset = 0
        for p in self.params:
            views.append(buffer[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        return buffer, views, buffer[offset:offset + len(self.params)]

    def free_buffer(self, kept: Callable[[torch.Tensor], bool]) -> None:
        """Reduce into a buffer that ``kept`` says no collective holds (an elastic log keeps reduced ones).

        The spares are in the order they were used, and a log lets go of the oldest first: if the
        oldest is still kept, so are the others.
        """
        if not kept(self.buffer):
            return
        self.spares.append((self.buffer, self.views, self.flags))
        if len(self.spares) > 1 and not kept(self.spares[0][0]):
            self.buffer, self.views, self.flags = self.spares.pop(0)
        else:
            self.buffer, self.views, self.flags = self._allocate()


class GradientSynchronizer:
    """Sums gradients of registered parameters across replicas; see module docstring."""

    def __init__(self, collective, bucket_cap_mb: float = 25.0, compression: Optional[str] = None,
                 state: Optional[StateAverager] = None) -> None:
        self._collective = collective
        #: the collective where it logs reduced buckets itself (elastic), else None: a plain collective's
        #: bucket goes straight to `Collective.all_reduce_async`
        self._log: Optional[ReductionLog] = collective if isinstance(collective, ReductionLog) else None
        if self._log is not None:
            self._launch = self._launch_logged  # type: ignore[method-assign]
        self._state = state
        self._cap_bytes = int(bucket_cap_mb * 1024 * 1024)
        self._wire_dtype = _WIRE_DTYPES[compression]
        self._params: List[torch.nn.Parameter] = []
        self._buckets: List[_Bucket] = []
        self._where: Dict[int, tuple] = {}
        self._hook_handles: Dict[int, object] = {}  # id(param) -> hook handle
        self._layout: tuple = ()  # the requires_grad flags the buckets were built from
        self._next_launch = 0
        self._touched = False
        self._lock = threading.Lock()
        self.enabled = True

    # ----------------------------------------------------------- building
    def add_parameters(self, params: List[torch.nn.Parameter]) -> None:
        fresh = [p for p in params if id(p) not in self._where]
        for p in fresh:
            self._params.append(p)
            self._where[id(p)] = None
        if fresh:
            with self._lock:
                self._rebuild()
            self.register_hooks()
            register_parameters(self, fresh)

    def register_hooks(self) -> None:
        """Hook every parameter that requires grad and has no hook yet (cheap; call between steps)."""
        ref = weakref.ref(self)
        for p in self._params:
            if p.requires_grad and id(p) not in self._hook_handles:
                self._hook_handles[id(p)] = p.register_post_accumulate_grad_hook(
                    lambda param, ref=ref: ref() and ref()._on_grad_ready(param))

    def _flags(self) -> tuple:
        return tuple(p.requires_grad for p in self._params)

    def _refresh_layout(self) -> None:
        """Rebuild the buckets if ``requires_grad`` flags changed since they were built (lock held)."""
        if self._flags() != self._layout:
            self._rebuild()

    def _rebuild(self) -> None:
        groups: Dict[tuple, List[torch.nn.Parameter]] = {}
        buckets: List[List[torch.nn.Parameter]] = []
        sizes: Dict[tuple, int] = {}
        for p in reversed(self._params):
            if not p.requires_grad:
                continue
            key = (p.dtype, p.device)
            groups.setdefault(key, []).append(p)
            sizes[key] = sizes.get(key, 0) + p.numel() * p.element_size()
            cap = min(self._cap_bytes, _FIRST_BUCKET_BYTES) if not buckets else self._cap_bytes
            if sizes[key] >= cap:
                buckets.append(groups.pop(key))
                sizes[key] = 0
        buckets.extend(g for g in groups.values() if g)
        flag = self._collective.step_flag
        self._buckets = [_Bucket(i, ps, self._wire_dtype, flag if i == len(buckets) - 1 else None)
                         for i, ps in enumerate(buckets)]
        self._where = {id(p): None for p in self._params}
        for b in self._buckets:
            for slot, p in enumerate(b.params):
                self._where[id(p)] = (b, slot)
        self._layout = self._flags()
        self._next_launch = 0

    @property
    def parameters(self) -> List[torch.nn.Parameter]:
        return list(self._params)

    @property
    def state(self) -> Optional[StateAverager]:
        """The averager of non-trainable state run after each step's sync, if any."""
        return self._state

    # ------------------------------------------------------------- hooks
    def _on_grad_ready(self, param: torch.nn.Parameter) -> None:
        if not self.enabled:
            return
        with self._lock:
            if not self._touched:
                self._touched = True
                self._refresh_layout()
            where = self._where.get(id(param))
            if where is None:  # became trainable after this step's layout: `finish` sums it
                return
            bucket, slot = where
            if bucket.handle is not None:
                bucket.dirty = True
                return
            if not bucket.ready[slot]:
                bucket.ready[slot] = True
                bucket.pending -= 1
            while self._next_launch < len(self._buckets) and self._buckets[self._next_launch].pending == 0:
                self._launch(self._buckets[self._next_launch])
                self._next_launch += 1

    def _launch(self, bucket: _Bucket) -> None:
        self._fill(bucket)
        bucket.handle = self._collective.all_reduce_async(bucket.buffer, ReduceOp.SUM)

    def _launch_logged(self, bucket: _Bucket) -> None:
        """`_launch` where the collective is a `ReductionLog` (elastic): it keeps the reduced bucket, not a copy."""
        log = self._log
        assert log is not None
        bucket.free_buffer(log.keeps)
        self._fill(bucket)
        bucket.handle = log.all_reduce_logged(bucket.buffer, lambda: self._fill(bucket))

    def _fill(self, bucket: _Bucket) -> None:
        """Copy this replica's gradients (and the step flag) into the bucket's buffer."""
        with torch.no_grad():
            present = [p.grad is not None for p in bucket.params]
            views, grads = [], []
            for p, view, has in zip(bucket.params, bucket.views, present):
                if not has:
                    view.zero_()
                elif p.grad.data_ptr() == view.data_ptr():
                    # The gradient accumulated into last step's bucket view: give the
                    # parameter its own copy, so a later backward never writes into
                    # a buffer that is being reduced.
                    p.grad = view.clone()
                else:
                    views.append(view)
                    grads.append(p.grad)
            if views:
                torch._foreach_copy_(views, grads)  # one launch for the bucket on a GPU
            bucket.complete = all(present)
            if bucket.complete:
                bucket.flags.fill_(1)
            else:
                for slot, has in enumerate(present):
                    bucket.flags[slot] = 1 if has else 0
            if bucket.step_flag is not None:
                bucket.step_flag.fill(bucket.buffer[-bucket.step_flag.width:])

    # ------------------------------------------------------------ finish
    def finish(self) -> None:
        """Complete this step's reduction and write summed gradients back (collective)."""
        with self._lock:
            if not self._touched:
                if not (self.enabled and self._unhooked_gradients()):
                    return
                self._touched = True
                self._refresh_layout()
            while self._next_launch < len(self._buckets):
                self._launch(self._buckets[self._next_launch])
                self._next_launch += 1
        for bucket in self._buckets:
            self._collective.wait(bucket.handle)
            if bucket.dirty:
                self._launch(bucket)
                self._collective.wait(bucket.handle)
            self._write_back(bucket)
        late = [p for p in self._params if p.requires_grad and self._where.get(id(p)) is None]
        if late:
            self._reduce_unbucketed(late)
        self._touched = False
        self._next_launch = 0
        self.register_hooks()
        if self._state is not None:
            self._state.average_changed()

    def _unhooked_gradients(self) -> bool:
        """True if a trainable parameter without a hook got a gradient (no hook told us)."""
        return any(p.requires_grad and p.grad is not None and id(p) not in self._hook_handles
                   for p in self._params)

    def _write_back(self, bucket: _Bucket) -> None:
        """Hand the summed gradients to the parameters.

        Without compression ``p.grad`` becomes a view of the bucket (no copy);
        the next launch copies fresh gradients over it, after the step used it.
        """
        # A replica that had every gradient knows each summed flag is at least 1 without reading
        # it (the usual step); one that lacked some reads them, and reaches the same decisions.
        flags = [1] * len(bucket.params) if bucket.complete else bucket.flags.tolist()
        if bucket.step_flag is not None:
            bucket.step_flag.deliver_tail(bucket.buffer[-bucket.step_flag.width:])
        with torch.no_grad():
            for p, view, flag in zip(bucket.params, bucket.views, flags):
                if flag <= 0:
                    p.grad = None
                elif view.dtype == p.dtype:
                    p.grad = view
                elif p.grad is None:
                    p.grad = view.to(p.dtype)
                else:
                    p.grad.copy_(view)
        bucket.ready = [False] * len(bucket.params)
        bucket.pending = len(bucket.params)
        bucket.handle = None
        bucket.dirty = False

    def _reduce_unbucketed(self, params: List[torch.nn.Parameter]) -> None:
        """Parameters that became trainable after this step's layout: one message, then rebucket.

        ``params`` is in registration order and chosen from ``requires_grad``
        flags, so every replica sends the same message.
        """
        by_kind: Dict[tuple, List[torch.nn.Parameter]] = {}
        for p in params:
            by_kind.setdefault((p.dtype, p.device), []).append(p)
        for group in by_kind.values():
            bucket = _Bucket(-1, group, self._wire_dtype)
            self._launch(bucket)
            self._collective.wait(bucket.handle)
            self._write_back(bucket)
        with self._lock:
            self._rebuild()
