"""`TorchCollective`: the `Collective` interface over ``torch.distributed``.

`TorchCollective.connect` runs the rendezvous at the chief's address, starts
the heartbeat monitor and creates two process groups: one for data (gradient
buckets, reductions, broadcasts — possibly asynchronous) and one for small
control messages, so that a control message never has to queue behind, or be
matched against, an in-flight gradient bucket. Any failure of a collective is
turned into one error line that names the task that is gone.

Example:
    >>> c = TorchCollective.connect(resolver, CommunicationOptions(timeout_seconds=10),
    ...                             torch.device("cpu"))
    >>> c.all_reduce(torch.ones(2))          # on 2 workers
    tensor([2., 2.])
"""
from __future__ import annotations

import gc
import os
import time
from datetime import timedelta
from typing import Any, List, Optional

import torch
import torch.distributed as dist

from distrib import hooks
from distrib.cluster.hostcheck import check_task_addresses
from distrib.comm.attempt import attempt_namespace
from distrib.comm.collective import Collective, ReduceOp
from distrib.comm.errors import CollectiveTimeoutError, DistribCommError, WorkerLostError, first_line
from distrib.comm.gpu_sharing import choose_backend
from distrib.comm.health import HealthMonitor
from distrib.comm.options import CommunicationImplementation, CommunicationOptions
from distrib.comm.process_group import init_process_group
from distrib.comm.rendezvous import connect_store, wait_for_all

__all__ = ["TorchCollective"]

_TORCH_OPS = {ReduceOp.SUM: dist.ReduceOp.SUM, ReduceOp.MAX: dist.ReduceOp.MAX,
              ReduceOp.MIN: dist.ReduceOp.MIN}


#: Marks a ``GLOO_SOCKET_IFNAME`` that distrib chose (not the user): the next job in this process,
#: or a program this process starts (it inherits the environment), chooses again.
_CHOSEN_IFNAME = "DISTRIB_GLOO_SOCKET_IFNAME_CHOSEN"


def use_interface_for_gloo(interface: str) -> None:
    """Point gloo at this task's interface, unless the user named one in ``GLOO_SOCKET_IFNAME``.

    Example: a process that ran a loopback job sets ``lo``; a task it later starts
    on another host's address (inheriting the environment) calls this with
    ``eth1`` and gets ``eth1``, where a plain ``setdefault`` kept ``lo`` and its
    peers were told to dial 127.0.0.1. A user's own ``GLOO_SOCKET_IFNAME=ib0``
    stays ``ib0``.
    """
    current = os.environ.get("GLOO_SOCKET_IFNAME")
    if current is None or current == os.environ.get(_CHOSEN_IFNAME):
        os.environ["GLOO_SOCKET_IFNAME"] = os.environ[_CHOSEN_IFNAME] = interface


class TorchCollective(Collective):
    """Collectives among the replicas of a job, over torch.distributed."""

    #: The data group's backend the tasks agreed on (gloo where two tasks share a GPU).
    backend = "gloo"

    def __init__(self, rank: int, world_size: int, group: Any, control_group: Any,
                 monitor: Optional[HealthMonitor], describe, timeout: float, store: Any = None,
                 raw_store: Any = None, backend: Optional[str] = None) -> None:
        """``raw_store``: the store ``store`` wraps (kept alive with it); ``backend``: the data group's."""
        self._rank = rank
        self._world_size = world_size
        self._group = group
        self._control = control_group
        self._monitor = monitor
        self._describe = describe
        self._timeout = timeout
        self._store = store
        self._raw_store = raw_store  # a Python Store (AuthStore) must outlive the PrefixStore around it
        if backend is not None:
            self.backend = backend
        self._closed = False
        self._peer_lost = False

    @classmethod
    def connect(cls, resolver: Any, options: CommunicationOptions, device: torch.device,
                members: Optional[int] = None) -> "TorchCollective":
        """Meet the other tasks; ``members``: how many of the cluster's tasks start the job (default: all).

        An elastic job may start with fewer tasks than its cluster lists
        (``distrib launch --workers MIN:MAX``): tasks ``0..members-1`` form the
        process groups; the store and health monitor are sized for every task,
        the others join later (`distrib.comm.elastic`).
        """
        host, port = resolver.rendezvous_address
        rank, cluster_size = resolver.rank, resolver.world_size
        world = cluster_size if members is None else members
        timeout = options.timeout
        describe = resolver.describe
        interface = check_task_addresses(resolver)
        if interface is not None:  # else gloo picks what the host name resolves to, maybe loopback
            use_interface_for_gloo(interface)
        namespace = attempt_namespace()  # a restarted attempt never reads the last one's keys
        raw_store = connect_store(host, port, rank, cluster_size, timeout, describe)
        pg_timeout = timedelta(seconds=timeout)
        raw_store.set_timeout(pg_timeout)  # a worker's client kept the short connect timeout
        store = dist.PrefixStore(namespace, raw_store)
        wait_for_all(store, rank, world, timeout, describe)
        backend = choose_backend(store, rank, world, device, options.backend_for(device),
                                 options.implementation is CommunicationImplementation.AUTO,
                                 timeout, describe)
        monitor = HealthMonitor(host, port, rank, cluster_size, timeout, describe, namespace=namespace)
        if world < cluster_size:
            monitor.forget(list(range(world, cluster_size)))
        try:
            if not dist.is_initialized():
                init_process_group(backend, device, store=dist.PrefixStore("distrib/pg", store),
                                   rank=rank, world_size=world, timeout=pg_timeout)
            group = dist.group.WORLD
            control = dist.new_group(backend="gloo", timeout=pg_timeout)
        except Exception as exc:
            monitor.close()
            raise DistribCommError(
                f"{describe(rank)} could not set up {backend} among {world} tasks: {first_line(exc)}") from None
        collective = cls(rank, world, group, control, monitor, describe, timeout, store, raw_store=raw_store,
                         backend=backend, **cls._connect_extras(resolver))
        hooks.at_exit(collective.shutdown)
        return collective

    @classmethod
    def _connect_extras(cls, resolver: Any) -> dict:
        """What `connect` passes a subclass's constructor beyond this class's arguments (none here)."""
        return {}

    # ---------------------------------------------------------- identity
    @property
    def rank(self) -> int:
        return self._rank

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def world_size(self) -> int:
        return self._world_size

    # ------------------------------------------------------- collectives
    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> torch.Tensor:
        return self._call("all_reduce", self._all_reduce, tensor, op, self._group)

    def _all_reduce(self, tensor: torch.Tensor, op: ReduceOp, group: Any) -> torch.Tensor:
        if op is ReduceOp.MEAN:
            dist.all_reduce(tensor, dist.ReduceOp.SUM, group=group)
            return tensor.div_(self._world_size) if tensor.is_floating_point() else tensor // self._world_size
        dist.all_reduce(tensor, _TORCH_OPS[op], group=group)
        return tensor

    def all_reduce_async(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> Any:
        """Start an in-place all-reduce; pass the returned handle to `wait`."""
        try:
            return dist.all_reduce(tensor, _TORCH_OPS[op], group=self._group, async_op=True)
        except Exception as exc:
            raise self._translate("all_reduce", exc) from None

    def wait(self, handle: Any) -> None:
        if handle is None:
            return
        self._call("all_reduce", handle.wait)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        def run() -> torch.Tensor:
            dist.broadcast(tensor, src, group=self._group)
            return tensor
        return self._call("broadcast", run)

    def all_gather(self, tensor: torch.Tensor) -> List[torch.Tensor]:
        return self._all_gather(tensor, self._group)

    def control_broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Small host-side payloads go over the gloo control group (also under NCCL)."""
        def run() -> torch.Tensor:
            dist.broadcast(tensor, src, group=self._control)
            return tensor
        return self._call("broadcast", run)

    def control_all_gather(self, tensor: torch.Tensor) -> List[torch.Tensor]:
        return self._all_gather(tensor, self._control)

    def _all_gather(self, tensor: torch.Tensor, group: Any) -> List[torch.Tensor]:
        if tensor.dim() == 0:
            tensor = tensor.reshape(1)

        def run() -> List[torch.Tensor]:
            size = torch.tensor([tensor.shape[0]], dtype=torch.int64, device=tensor.device)
            sizes = [torch.zeros_like(size) for _ in range(self._world_size)]
            dist.all_gather(sizes, size, group=group)
            counts = [int(s.item()) for s in sizes]
            padded = tensor.new_zeros((max(counts),) + tuple(tensor.shape[1:]))
            padded[: tensor.shape[0]] = tensor
            outs = [torch.empty_like(padded) for _ in range(self._world_size)]
            dist.all_gather(outs, padded.contiguous(), group=group)
            return [o[:n] for o, n in zip(outs, counts)]
        return self._call("all_gather", run)

    def barrier(self) -> None:
        self._call("barrier", lambda: dist.barrier(group=self._control))

    def agree_any(self, flag: bool) -> bool:
        t = torch.tensor([1.0 if flag else 0.0])
        return bool(self._call("agree", self._all_reduce, t, ReduceOp.MAX, self._control).item() > 0)

    def control_all_reduce(self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> torch.Tensor:
        """A small CPU all-reduce on the control group (never queues behind gradient buckets)."""
        return self._call("all_reduce", self._all_reduce, tensor, op, self._control)

    # ------------------------------------------------------------ errors
    def _call(self, name: str, fn, *args):
        monitor = self._monitor
        if monitor is not None:
            monitor.busy_since = time.monotonic()
        try:
            return fn(*args)
        except DistribCommError:
            raise
        except Exception as exc:
            raise self._translate(name, exc) from None
        finally:
            if monitor is not None:
                monitor.busy_since = None

    def _translate(self, op: str, exc: BaseException) -> DistribCommError:
        me = self._describe(self._rank)
        text = first_line(exc)
        silent = "timeout" in text.lower() or "timed out" in text.lower()
        lost = self._monitor.find_lost(silent=silent) if self._monitor is not None else []
        if lost:
            self._peer_lost = True  # shutdown must not wait on a store a stopped chief never answers
            return WorkerLostError(
                f"{'; '.join(lost)}: {op} on {me} failed ({first_line(exc)})")
        if silent:
            return CollectiveTimeoutError(
                f"{op} on {me} timed out after {self._timeout:g}s: every task is alive, so one of "
                f"them is not running the same collective (a chief-only or rank-dependent code path?)")
        return DistribCommError(f"{op} on {me} failed: {text}")

    def shutdown(self) -> None:
        """Leave the job: say so, and on the chief keep the store up until the others left too.

        The chief hosts the rendezvous store; tearing it down while a worker
        still finishes its last steps would look to that worker like the
        chief's death. So every task marks itself done, and the chief waits
        (at most the timeout) until each other task is done or has stopped beating.
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._peer_lost:
                raise ConnectionError("a peer is lost: nothing left to coordinate")
            self._store.set(f"distrib/done/{self._task_rank(self._rank)}", "1")
            if self._rank == 0 and self._monitor is not None:
                self._wait_for_others_to_leave()
        except Exception:
            pass  # the store is gone already: nothing left to coordinate
        if self._monitor is not None:
            self._monitor.close(wait=not self._peer_lost)  # a beat may be stuck on a silent chief
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass
        # Release the last references to the groups and stores now, while the interpreter is
        # whole: a gloo group destroyed during interpreter finalization can abort the process.
        self._control = self._group = self._store = None
        if self._monitor is not None:
            self._monitor.release()
        gc.collect()

    def _task_rank(self, rank: int) -> int:
        """The rank ``rank`` had when the job started (what heartbeats and done flags are keyed by)."""
        return rank

    def _tasks_to_wait_for(self) -> set:
        """The tasks (by their rank at the start) the chief waits for before it closes the store."""
        return {self._task_rank(r) for r in range(1, self._world_size)}

    def _wait_for_others_to_leave(self) -> None:
        deadline = time.monotonic() + self._timeout
        others = self._tasks_to_wait_for()
        while others and time.monotonic() < deadline:
            others = {r for r in others if not self._store.check([f"distrib/done/{r}"])}
            others -= set(self._monitor.stale_peers(self._monitor.interval * 3))
            if others:
                time.sleep(0.05)  # poll: the store has no wait-for-any primitive
