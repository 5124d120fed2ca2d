"""The RPC world of a parameter-server job: joining it, calling tasks, serving, leaving.

Transport: ``torch.distributed.rpc`` over TensorPipe (CPU). It moves tensors
without pickling their data, runs handlers on a thread pool, bounds every call
with a timeout, and reports a peer that died (even by SIGKILL) as a failed
call at once — what asynchronous training with retries needs.

Start-up: every task first meets the others at the chief's ``TF_CONFIG``
address (a ``torch.distributed`` TCP store hosted by the chief), which names
any task that never arrives; the chief then publishes a fresh port on which
``rpc.init_rpc`` forms the world (chief, workers, ps in rank order).

Shutdown: worker and ps tasks serve in their main thread (`serve`) until the
chief tells them to stop — which the chief does when its program ends
(`shutdown_cluster`, registered with ``atexit``) — and then leave the world
and exit with status 0. If the chief disappears without saying so, each task
notices within the timeout (it pings the chief) and exits with status 1 and
one line naming the chief.
"""
from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
import warnings
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed.rpc as rpc

from distrib.cluster.task import TaskInfo
from distrib.cluster.hostcheck import resolve_cluster_hosts
from distrib.comm.rendezvous import connect_store, wait_for_all
from distrib.strategies.ps_cluster import PSCluster, rpc_name
from distrib.strategies.ps_errors import UnavailableError

__all__ = ["Runtime", "run_on_main_thread", "unavailable", "ping"]

log = logging.getLogger("distrib.ps")

_RPC_PORT_KEY = "distrib/ps/rpc_port"
_MAIN_WORK: "queue.Queue[Any]" = queue.Queue()
_JOINED: list = []
_STOP = threading.Event()


def ping() -> int:
    """RPC handler: proves the task is alive (its pid)."""
    return os.getpid()


_GRACEFUL = [True]


def _request_stop(graceful: bool) -> None:
    """RPC handler: the chief's program ended; leave `serve` (together with everyone if ``graceful``)."""
    _GRACEFUL[0] = bool(graceful)
    _STOP.set()
    _MAIN_WORK.put(None)


def run_on_main_thread(work: Callable[[], Any]) -> torch.futures.Future:
    """Queue ``work`` for the serving main thread; the future gets its return value."""
    future: torch.futures.Future = torch.futures.Future()
    _MAIN_WORK.put((work, future))
    return future


def unavailable(description: str, exc: BaseException, task: Optional[str] = None) -> UnavailableError:
    """An `UnavailableError` for a failed call to ``description`` (``"ps 0 (h:p)"``)."""
    return UnavailableError(f"{description} is unavailable: {_reason(exc)}", task=task)


def is_remote_exception(exc: BaseException) -> bool:
    """True when ``exc`` was raised by the handler on the peer (not by the transport)."""
    return "On WorkerInfo(" in str(exc)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = text.split(" (this error originated at", 1)[0]
    if "timeout" in text.lower() or "timed out" in text.lower():
        return f"no answer in time ({text})"
    return {"eof": "connection closed (the process died?)"}.get(text, text)


class Runtime:
    """This process's membership in the RPC world.

    Args:
        cluster: the validated cluster.
        timeout: seconds any call or start-up wait may take before it is an error.
    """

    def __init__(self, cluster: PSCluster, timeout: float) -> None:
        self.cluster = cluster
        self.timeout = float(timeout)
        self._store = None
        self._started = False
        self._closed = False

    @property
    def ping_interval(self) -> float:
        return max(0.2, min(2.0, self.timeout / 10))

    # ------------------------------------------------------------ joining
    def start(self) -> None:
        """Meet every task at the chief, then form the RPC world (bounded by the timeout)."""
        resolver = self.cluster.resolver  # a bad host name fails now, not after a wait
        resolve_cluster_hosts(resolver.cluster_spec(), getattr(resolver, "cluster_field", "the cluster"))
        if _JOINED:
            raise RuntimeError("ParameterServerStrategy: this process already joined a parameter-server "
                               "job; create the strategy once per process")
        _JOINED.append(self)
        c = self.cluster
        host, port = c.chief_address
        rank, world = c.rank, len(c.tasks)
        self._store = connect_store(host, port, rank, world, self.timeout, c.describe_rank)
        wait_for_all(self._store, rank, world, self.timeout, c.describe_rank)
        if rank == 0:
            from distrib.launch.ports import free_port

            self._store.set(_RPC_PORT_KEY, str(free_port(host)))
        rpc_port = int(self._store.get(_RPC_PORT_KEY))
        options = rpc.TensorPipeRpcBackendOptions(
            init_method=f"tcp://{_bracket(host)}:{rpc_port}", rpc_timeout=self.timeout,
            num_worker_threads=max(8, 2 * world))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's own deprecation noise in init_rpc
            rpc.init_rpc(rpc_name(c.task), rank=rank, world_size=world, rpc_backend_options=options)
        self._started = True

    # ------------------------------------------------------------ calling
    def call_async(self, task: TaskInfo, fn: Callable, args: Sequence = (),
                   timeout: Optional[float] = None) -> torch.futures.Future:
        """Call ``fn(*args)`` on ``task``; ``timeout=0`` waits forever."""
        return rpc.rpc_async(rpc_name(task), fn, args=tuple(args),
                             timeout=self.timeout if timeout is None else timeout)

    def call(self, task: TaskInfo, fn: Callable, args: Sequence = (),
             timeout: Optional[float] = None) -> Any:
        """Call ``fn(*args)`` on ``task`` and wait; a lost task is an `UnavailableError`."""
        return self.wait(task, self.call_async(task, fn, args, timeout))

    def wait(self, task: TaskInfo, future: torch.futures.Future) -> Any:
        """The future's value; transport failures become an `UnavailableError` naming ``task``."""
        try:
            return future.wait()
        except Exception as exc:
            if is_remote_exception(exc):
                raise
            raise unavailable(self.cluster.describe(task.task_type, task.task_id), exc,
                              str(task)) from None

    def alive(self, task: TaskInfo) -> bool:
        """Whether ``task`` answers a ping within the timeout."""
        return self.ping_failure(task) is None

    def ping_failure(self, task: TaskInfo) -> Optional[str]:
        """None if ``task`` answers a ping within the timeout, else why not."""
        try:
            rpc.rpc_sync(rpc_name(task), ping, timeout=self.timeout)
            return None
        except Exception as exc:  # noqa: BLE001
            return _reason(exc)

    # ------------------------------------------------------------ serving
    def serve(self) -> None:
        """Run work queued by RPC handlers in this (main) thread until the chief says stop.

        Returns normally after a stop request; exits the process with status 1
        and one line if the chief stops answering.
        """
        chief = self.cluster.tasks[0]
        next_ping = time.monotonic() + self.ping_interval
        while not _STOP.is_set():
            try:
                item = _MAIN_WORK.get(timeout=self.ping_interval)
            except queue.Empty:
                item = None
            if item is not None:
                work, future = item
                try:
                    future.set_result(work())
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    future.set_exception(exc)
            if time.monotonic() >= next_ping and not _STOP.is_set():
                next_ping = time.monotonic() + self.ping_interval
                failure = self.ping_failure(chief)
                if failure is not None:
                    if _STOP.is_set():
                        break
                    me = self.cluster.describe(self.cluster.task.task_type, self.cluster.task.task_id)
                    self._leave(graceful=False)
                    raise SystemExit(f"distrib: {me}: the {self.cluster.describe('chief')} is "
                                     f"unavailable: {failure}; exiting")
        self._leave(graceful=_GRACEFUL[0])

    # ------------------------------------------------------------ leaving
    def shutdown_cluster(self) -> None:
        """Chief: tell every other task to exit, then leave the world (idempotent).

        When every task still answers, all leave together (``rpc.shutdown(graceful=True)``,
        quiet and orderly); after a loss each leaves on its own at once.
        """
        if not self._started or self._closed:
            return
        others = self.cluster.tasks[1:]
        quick = min(5.0, self.timeout)
        graceful = all(self._answers(f) for f in [self._try_async(t, ping, (), quick) for t in others])
        futures = [self._try_async(t, _request_stop, (graceful,), quick) for t in others]
        acked = all(self._answers(f) for f in futures)
        self._leave(graceful=graceful and acked)

    def _try_async(self, task: TaskInfo, fn: Callable, args: Sequence, timeout: float) -> Any:
        try:
            return self.call_async(task, fn, args, timeout=timeout)
        except Exception:  # noqa: BLE001 - a task already gone
            return None

    @staticmethod
    def _answers(future: Any) -> bool:
        if future is None:
            return False
        try:
            future.wait()
            return True
        except Exception:  # noqa: BLE001
            return False

    def _leave(self, graceful: bool) -> None:
        if self._closed:
            return
        self._closed = True
        if graceful:
            try:
                rpc.shutdown(graceful=True, timeout=self.timeout)
                return
            except Exception as exc:  # noqa: BLE001 - someone did not come: leave on our own
                log.debug("distrib: graceful rpc.shutdown failed: %s", exc)
        try:
            rpc.shutdown(graceful=False)
        except Exception as exc:  # noqa: BLE001 - nothing left to do about it
            log.debug("distrib: rpc.shutdown failed: %s", exc)
        sys.stdout.flush()


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
