"""The channel of a parameter-server job: joining it, calling tasks, serving, leaving.

Transport: gRPC (`distrib.strategies.parameter_server.transport`). Every task serves
the handlers of its role (chief: ``ping``; worker: ``ping``, ``stop``, run a
scheduled function; ps: ``ping``, ``stop``, the variable handlers of
`distrib.strategies.parameter_server.server`) on a free port of its ``TF_CONFIG`` host.
Every call is authenticated before its bytes are read
(`distrib.strategies.parameter_server.auth`) with the job secret
(`distrib.comm.secret.cluster_secret`: the one `distrib launch` sets, or
``DISTRIB_JOB_SECRET`` / ``_FILE``, or this user's per-host secret when the
chief is on loopback). A job beyond loopback with neither a secret nor
mutual TLS does not start: shipped functions travel as pickles inside
authenticated calls, so an open channel would run a stranger's code. With
``DISTRIB_PS_FUNCTIONS=registered`` nothing travels as a pickle
(`distrib.strategies.parameter_server.registered`), and such a job starts
after one warning line. Every call has a deadline, and a peer that died
(even by SIGKILL) fails calls at once (connection refused).

Start-up: every task first meets the others at the chief's ``TF_CONFIG``
address (a ``torch.distributed`` TCP store hosted by the chief), which names
any task that never arrives; each then publishes its server's port there
and reads the others'.

Shutdown: worker and ps tasks serve in their main thread (`serve`) until the
chief tells them to stop — which the chief does when its program ends
(`shutdown_cluster`, registered with ``atexit``) — and then stop their
server and exit with status 0. If the chief disappears without saying so,
each task notices within the timeout (it pings the chief) and exits with
status 1 and one line naming the chief.
"""
from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from datetime import timedelta
from typing import Any, Callable, Dict, Optional, Sequence

import torch

from distrib.cluster.address import parse_address
from distrib.cluster.task import TaskInfo
from distrib.cluster.hostcheck import resolve_cluster_hosts
from distrib.comm.attempt import attempt_store
from distrib.comm.rendezvous import connect_store, wait_for_all
from distrib.comm.secret import NO_SECRET_ADVICE, cluster_secret, is_loopback, job_secret
from distrib.strategies.parameter_server.auth import CallAuth
from distrib.strategies.parameter_server.cluster import PSCluster
from distrib.strategies.parameter_server.errors import ChannelConfigError, ChannelError, PeerError, UnavailableError
from distrib.strategies.parameter_server.registered import MODE_VARIABLE, registered_only
from distrib.strategies.parameter_server.transport import Channel, Server, tls_from_env
from distrib.errors import first_line

__all__ = ["Runtime", "run_on_main_thread", "unavailable", "ping", "request_stop", "handler_name"]

log = logging.getLogger("distrib.ps")

_PORT_KEY = "distrib/ps/grpc_port/"
_EXPOSED = "run code in its tasks"
_EXPOSED_CLOSED = ("read and change its variables and call the functions it registered (no other code: "
                   f"{MODE_VARIABLE}=registered)")
_MAIN_WORK: "queue.Queue[Any]" = queue.Queue()
_JOINED: list = []
_STOP = threading.Event()


def ping() -> int:
    """Channel handler: proves the task is alive (its pid)."""
    return os.getpid()


_GRACEFUL = [True]


def request_stop(graceful: bool) -> None:
    """Channel handler: the chief's program ended; leave `serve` (together with everyone if ``graceful``)."""
    _GRACEFUL[0] = bool(graceful)
    _STOP.set()
    _MAIN_WORK.put(None)


def run_on_main_thread(work: Callable[[], Any]) -> torch.futures.Future:
    """Queue ``work`` (from a handler thread) for the serving main thread; the future gets its return value."""
    future: torch.futures.Future = torch.futures.Future()
    _MAIN_WORK.put((work, future))
    return future


def unavailable(description: str, exc: BaseException, task: Optional[str] = None) -> UnavailableError:
    """An `UnavailableError` for a failed call to ``description`` (``"ps 0 (h:p)"``)."""
    return UnavailableError(f"{description} is unavailable: {_reason(exc)}", task=task)


def is_remote_exception(exc: BaseException) -> bool:
    """True when ``exc`` was raised by the handler on the peer (not by the transport)."""
    return isinstance(exc, PeerError)


def handler_name(fn: Callable) -> str:
    """The name a handler is called by on the channel: ``"distrib.strategies.parameter_server.server:inventory"``."""
    return f"{fn.__module__}:{fn.__qualname__}"


def _reason(exc: BaseException) -> str:
    text = first_line(exc)
    code = exc.code if isinstance(exc, ChannelError) else None  # the gRPC status of a failed call
    if code == "DEADLINE_EXCEEDED":
        return f"no answer in time ({text})"
    if code == "UNAVAILABLE":
        return "connection closed (the process died?)"
    if code == "UNAUTHENTICATED":
        return f"the call was refused ({text})"
    return text


class Runtime:
    """This process's membership in the parameter-server channel.

    Args:
        cluster: the validated cluster.
        timeout: seconds any call or start-up wait may take before it is an error.
        handlers: the channel handlers this task serves, by name (`handlers.role_handlers`).
    """

    def __init__(self, cluster: PSCluster, timeout: float, handlers: Dict[str, Callable]) -> None:
        self.cluster = cluster
        self.timeout = float(timeout)
        self._handlers = dict(handlers)
        self._store = None
        self._server: Optional[Server] = None
        self._addresses: Dict[TaskInfo, str] = {}
        self._channels: Dict[TaskInfo, Channel] = {}
        self._started = False
        self._closed = False

    @property
    def ping_interval(self) -> float:
        return max(0.2, min(2.0, self.timeout / 10))

    # ------------------------------------------------------------ joining
    def start(self) -> None:
        """Meet every task at the chief, serve, and learn the others' ports (bounded by the timeout)."""
        resolver = self.cluster.resolver  # a bad host name fails now, not after a wait
        resolve_cluster_hosts(resolver.cluster_spec(), getattr(resolver, "cluster_field", "the cluster"))
        if _JOINED:
            raise RuntimeError("ParameterServerStrategy: this process already joined a parameter-server "
                               "job; create the strategy once per process")
        c = self.cluster
        host, port = c.chief_address
        rank, world = c.rank, len(c.tasks)
        tls = tls_from_env()
        closed = registered_only()
        if tls is None and not closed and job_secret() is None and not is_loopback(host):
            # refused in this one line: no "no job secret" warning first (cluster_secret would say it)
            raise ChannelConfigError(f"parameter-server job without a job secret and its chief {host} is "
                                     f"beyond loopback: anyone who can reach its ports could run code "
                                     f"in it, so it does not start ({MODE_VARIABLE}=registered on every "
                                     f"task sends no code); {NO_SECRET_ADVICE}")
        secret = job_secret() if tls is not None else cluster_secret(host, _EXPOSED_CLOSED if closed else _EXPOSED)
        _JOINED.append(self)
        auth = CallAuth(secret) if secret else None
        store = connect_store(host, port, rank, world, self.timeout, c.describe_rank)
        store.set_timeout(timedelta(seconds=self.timeout))  # a worker's client kept the short connect timeout
        self._raw_store = store  # a Python Store (AuthStore) must outlive the PrefixStore around it
        self._store = attempt_store(store)
        wait_for_all(self._store, rank, world, self.timeout, c.describe_rank)
        my_host = self._host_of(c.task)
        self._server = Server(my_host, self._handlers, auth, tls, threads=max(8, 2 * world),
                              name=str(c.task))
        self._store.set(f"{_PORT_KEY}{rank}", str(self._server.port))
        self._addresses[c.task] = f"{_bracket(my_host)}:{self._server.port}"
        for peer_rank, task in enumerate(c.tasks):
            if peer_rank == rank:
                continue
            text = self._store.get(f"{_PORT_KEY}{peer_rank}").decode(errors="replace")
            if not text.isdigit() or not 0 < int(text) < 65536:
                raise ChannelError(f"{c.describe_rank(peer_rank)} published the channel port {text!r}, "
                                   f"which is not a port number: is something else using the "
                                   f"chief's address {host}:{port}?", "INVALID_ARGUMENT")
            address = f"{_bracket(self._host_of(task))}:{int(text)}"
            self._channels[task] = Channel(address, auth, tls, dest=str(task))
            self._addresses[task] = address
        self._started = True

    def channel_address(self, task: TaskInfo) -> str:
        """``host:port`` of ``task``'s channel server (published by it at start-up)."""
        try:
            return self._addresses[task]
        except KeyError:
            raise ValueError(f"{task} is not a task of this parameter-server job") from None

    def _host_of(self, task: TaskInfo) -> str:
        field = f"TF_CONFIG cluster {task.task_type}[{task.task_id}]"
        address = self.cluster.resolver.cluster_spec().task_address(task.task_type, task.task_id)
        return parse_address(address, field)[0]

    # ------------------------------------------------------------ calling
    def call_async(self, task: TaskInfo, fn: Callable, args: Sequence = (),
                   timeout: Optional[float] = None) -> torch.futures.Future:
        """Call ``fn(*args)`` on ``task``; ``timeout=0`` waits forever."""
        channel = self._channels.get(task)
        if channel is None:
            raise ChannelError(f"no channel to {task} (not a task of this job, or the channel is "
                               f"closed)", "UNAVAILABLE")
        return channel.call_async(handler_name(fn), tuple(args),
                                  self.timeout if timeout is None else timeout)

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
            self.call_async(task, ping, (), self.timeout).wait()
            return None
        except Exception as exc:  # noqa: BLE001
            return _reason(exc)

    # ------------------------------------------------------------ serving
    def serve(self) -> None:
        """Run work queued by channel handlers in this (main) thread until the chief says stop.

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
        """Chief: tell every other task to exit, then stop serving (idempotent).

        Each task acknowledges the stop request before it stops serving; the chief
        stops its own server last (tasks ping it until they have stopped).
        """
        if not self._started or self._closed:
            return
        others = self.cluster.tasks[1:]
        quick = min(5.0, self.timeout)
        graceful = all([self._answers(f) for f in [self._try_async(t, ping, (), quick) for t in others]])
        futures = [self._try_async(t, request_stop, (graceful,), quick) for t in others]
        acked = all([self._answers(f) for f in futures])   # wait for every ack before closing channels
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
        for channel in self._channels.values():
            channel.close()
        self._channels = {}
        if self._server is not None:
            self._server.stop(grace=min(2.0, self.timeout) if graceful else 0.5)
        sys.stdout.flush()


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
