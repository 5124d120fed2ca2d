"""Dispatching scheduled functions to workers, with retries when a worker is lost.

One thread per worker takes the next function from a shared queue, sends
it to its worker and waits, checking that the worker still answers pings
(so a hung or partitioned worker is noticed within the timeout, not only a
dead one). Each worker thus runs one function at a time and the fastest
workers take the most work; workers never wait for each other.

Failures, as in TensorFlow:

* **a worker is lost** (its process died, or it stopped answering): the
  function it was running goes back to the front of the queue and runs on
  another worker (so a function may run more than once); the lost worker
  gets no more work. Only when every worker is lost is it an error
  (`UnavailableError` naming them).
* **a ps task is lost**: an `UnavailableError` naming it; queued functions
  are cancelled (their `RemoteValue` raises `CancelledError`).
* **the function raised**: the same exception, with the worker's traceback
  as its cause; queued functions are cancelled.

The first such error is raised by the next ``schedule``, ``join`` or
``done`` (and by the failed function's ``fetch``), then cleared.
"""
from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from distrib.cluster.task import TaskInfo
from distrib.strategies.parameter_server import worker as ps_worker
from distrib.strategies.parameter_server.errors import CancelledError, RemoteError, UnavailableError
from distrib.strategies.parameter_server.runtime import is_remote_exception, unavailable
from distrib.strategies.parameter_server.server import named_class
from distrib.strategies.parameter_server.values import RemoteValue
from distrib.errors import first_line

__all__ = ["Closure", "Dispatcher", "rebuild_error"]

log = logging.getLogger("distrib.coordinator")


class Closure:
    """One scheduled call: its pickled form, the shared objects it needs, hyper-parameters, result."""

    __slots__ = ("payload", "keys", "hyper", "value")

    def __init__(self, payload: bytes, keys: List[int], hyper: Dict[int, Any]) -> None:
        self.payload, self.keys, self.hyper = payload, keys, hyper
        self.value = RemoteValue()


class _WorkerLost(Exception):
    pass


class _Stopped(Exception):
    pass


class Dispatcher:
    """The queue of scheduled functions and the threads that run them on workers.

    Args:
        runtime: the chief's `Runtime`.
        worker_ids: the worker task ids.
        definitions: key -> `Definition` of shared objects (the exporter's table).
        on_success: called with the metric changes of each finished function.
    """

    def __init__(self, runtime: Any, worker_ids: List[int], definitions: Dict[int, Any],
                 on_success: Callable[[Dict[int, Dict[str, Any]]], None]) -> None:
        self._runtime = runtime
        self._definitions = definitions
        self._on_success = on_success
        self._cond = threading.Condition()
        self._queue: Deque[Closure] = collections.deque()
        self._inflight = 0
        self._error: Optional[BaseException] = None
        self._stopped = False
        self._alive: Dict[int, bool] = {w: True for w in worker_ids}
        self._lost: Dict[int, str] = {}
        self._installed: Dict[int, Set[int]] = {w: set() for w in worker_ids}
        self._threads = [threading.Thread(target=self._serve, args=(w,), daemon=True,
                                          name=f"distrib-dispatch-worker-{w}") for w in worker_ids]
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------ public
    def submit(self, closure: Closure) -> None:
        with self._cond:
            self._raise_pending()
            if not any(self._alive.values()):
                raise UnavailableError(f"every worker is lost: {self._lost_text()}")
            self._queue.append(closure)
            self._cond.notify_all()

    def join(self) -> None:
        """Wait until every submitted function finished (or was cancelled); raise the first error."""
        with self._cond:
            self._cond.wait_for(lambda: self._stopped or (not self._queue and self._inflight == 0))
            self._raise_pending()

    def done(self) -> bool:
        with self._cond:
            self._raise_pending()
            return not self._queue and self._inflight == 0

    def stop(self) -> None:
        """Stop dispatching (the chief's program ended); queued functions are cancelled."""
        with self._cond:
            self._stopped = True
            self._cancel_queue("the coordinator stopped")
            self._cond.notify_all()

    @property
    def lost_workers(self) -> Dict[int, str]:
        """Workers taken out of service, with the reason."""
        with self._cond:
            return dict(self._lost)

    # ------------------------------------------------------------ internals
    def _raise_pending(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
            self._cancel_queue(f"an earlier function failed: {type(error).__name__}: {error}")

    def _cancel_queue(self, why: str) -> None:
        while self._queue:
            self._queue.popleft().value.set_exception(CancelledError(f"scheduled function cancelled: {why}"))

    def _serve(self, worker: int) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopped or self._queue)
                if self._stopped:
                    return
                closure = self._queue.popleft()
                self._inflight += 1
            try:
                reply = self._run_on(worker, closure)
            except _Stopped:
                return
            except _WorkerLost as lost:
                self._worker_lost(worker, closure, str(lost))
                return
            with self._cond:
                self._inflight -= 1
                self._finish(worker, closure, reply)
                self._cond.notify_all()

    def _run_on(self, worker: int, closure: Closure) -> Tuple[Any, ...]:
        task = TaskInfo("worker", worker)
        installed = self._installed[worker]
        defs = [(k, self._definitions[k].kind, self._definitions[k].payload, self._definitions[k].deps)
                for k in closure.keys if k not in installed]
        done = threading.Event()
        try:
            future = self._runtime.call_async(task, ps_worker.run_closure,
                                              (defs, closure.payload, closure.hyper), timeout=0)
        except Exception as exc:  # noqa: BLE001 - the agent could not even send
            raise _WorkerLost(str(unavailable(self._describe(worker), exc))) from None
        future.add_done_callback(lambda _: done.set())
        while not done.wait(self._runtime.ping_interval):
            if self._stopped:
                raise _Stopped()
            failure = self._runtime.ping_failure(task)
            if failure is not None:
                if done.is_set():
                    break
                raise _WorkerLost(f"{self._describe(worker)} is unavailable: {failure}")
        try:
            reply = future.wait()
        except Exception as exc:  # noqa: BLE001
            if self._stopped:
                raise _Stopped() from None
            if is_remote_exception(exc):
                return ("error", {"class": "builtins:RuntimeError", "args": [first_line(exc)]}, str(exc))
            raise _WorkerLost(str(unavailable(self._describe(worker), exc))) from None
        installed.update(k for k, *_ in defs)
        return reply

    def _finish(self, worker: int, closure: Closure, reply: Tuple[Any, ...]) -> None:
        kind = reply[0]
        if kind == "ok":
            try:
                self._on_success(reply[2])
                closure.value.set_result(reply[1])
            except Exception as exc:  # noqa: BLE001 - e.g. a result class the chief cannot load
                closure.value.set_exception(exc)
                self._fail(exc)
            return
        if kind == "ps":
            error: BaseException = UnavailableError(f"{reply[1]} (seen by {self._describe(worker)})",
                                                    task=reply[2])
        else:
            error = rebuild_error(reply[1], reply[2], self._describe(worker))
        closure.value.set_exception(error)
        self._fail(error)

    def _worker_lost(self, worker: int, closure: Closure, reason: str) -> None:
        with self._cond:
            self._inflight -= 1
            self._alive[worker] = False
            self._lost[worker] = reason
            if self._stopped:
                closure.value.set_exception(CancelledError("scheduled function cancelled: the coordinator stopped"))
            elif any(self._alive.values()):
                self._queue.appendleft(closure)
                log.warning("distrib: %s; its function is re-scheduled on the remaining workers", reason)
            else:
                error = UnavailableError(f"every worker is lost: {self._lost_text()}")
                closure.value.set_exception(error)
                self._fail(error)
            self._cond.notify_all()

    def _lost_text(self) -> str:
        return "; ".join(self._lost[w] for w in sorted(self._lost))

    def _describe(self, worker: int) -> str:
        return self._runtime.cluster.describe("worker", worker)


def rebuild_error(spec: Dict[str, Any], remote_traceback: str, where: str) -> BaseException:
    """The worker's exception (its class by name, among the chief's modules), its remote traceback as
    the cause and a note naming the worker."""
    try:
        error = named_class(spec["class"], BaseException)(*spec["args"])
    except Exception:  # noqa: BLE001 - a class the chief lacks, or a constructor with other arguments
        error = RuntimeError(remote_traceback.strip().splitlines()[-1])
    error.__cause__ = RemoteError(f"\n\nTraceback on {where}:\n{remote_traceback}")
    if hasattr(error, "add_note"):
        error.add_note(f"(raised by a function scheduled on {where})")
    return error
