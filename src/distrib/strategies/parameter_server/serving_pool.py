"""`ServingPool`: the threads a task's gRPC server runs its handlers on, alive until the server stops.

A ``concurrent.futures.ThreadPoolExecutor`` stops taking work when the
interpreter starts to exit (its threads see the global exit flag, set before
any ``atexit`` function runs), while the chief's server must answer the other
tasks' pings until its own ``atexit`` shutdown tells them to stop. A call
arriving in that window made gRPC's serving thread die with ``RuntimeError:
cannot schedule new futures after shutdown`` and a traceback at a clean exit.
This pool's daemon threads take work until `shutdown` (the server's stop).

Example:
    >>> pool = ServingPool(max_workers=2, name="distrib-ps")
    >>> pool.submit(sum, [1, 2]).result()
    3
    >>> pool.shutdown()
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Executor, Future
from typing import Any, Callable, List, Optional, Tuple

__all__ = ["ServingPool"]

_Work = Optional[Tuple[Future, Callable[..., Any], tuple, dict]]


class ServingPool(Executor):
    """Up to ``max_workers`` daemon threads, started as work arrives (see the module docstring)."""

    def __init__(self, max_workers: int, name: str) -> None:
        self._queue: "queue.SimpleQueue[_Work]" = queue.SimpleQueue()
        self._max = max(1, int(max_workers))
        self._name = name
        self._threads: List[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name}: the server has stopped")
            self._queue.put((future, fn, args, kwargs))
            if self._queue.qsize() > self._idle and len(self._threads) < self._max:  # no thread free for it
                thread = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self._name}_{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            item = self._queue.get()
            with self._lock:
                self._idle -= 1
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                    future.set_exception(exc)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()
