"""`WorkerPool`: run one function on N threads or forked processes, stopped when its owner is dropped.

A parallel operator owns one pool; `stop_with` ties the pool's life to the
operator's iterator (a ``weakref.finalize``), so an iterator dropped
mid-epoch leaves no thread or process behind. Why threads by default and
when processes pay off is in docs/input-pipelines.md ("Threads or processes").

Example:
    >>> pool = WorkerPool(2, processes=False)
    >>> pool.submit(abs, -3).result()
    3
    >>> pool.shutdown()
"""
from __future__ import annotations

import multiprocessing
import os
import weakref
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Callable, Optional

import torch

__all__ = ["WorkerPool", "autotune", "parallel_calls", "with_element_note", "process_fn"]

_PROCESS_FN: Optional[Callable[..., Any]] = None


def autotune() -> int:
    """The worker count ``AUTOTUNE`` means: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def parallel_calls(num_parallel_calls: int, cap: int = 0) -> int:
    """``num_parallel_calls`` as a worker count (AUTOTUNE, -1, is `autotune`; ``cap`` > 0 bounds it)."""
    n = autotune() if int(num_parallel_calls) < 0 else int(num_parallel_calls)
    if n < 1:
        raise ValueError(f"num_parallel_calls must be >= 1 or AUTOTUNE (-1), got {num_parallel_calls}")
    return min(n, cap) if cap > 0 else n


def _start_process(fn: Callable[..., Any], torch_threads: int) -> None:
    global _PROCESS_FN
    _PROCESS_FN = fn  # inherited through fork: the function itself is never pickled
    if torch_threads > 0:
        torch.set_num_threads(torch_threads)


def process_fn() -> Callable[..., Any]:
    """In a worker process: the function its pool was made with."""
    assert _PROCESS_FN is not None, "not in a distrib.data worker process"
    return _PROCESS_FN


class WorkerPool:
    """``size`` workers: threads, or processes forked from this one.

    Args:
        size: the number of workers.
        processes: forked processes instead of threads.
        fn: with processes, the user's function, inherited by the children (never
            pickled; a task reads it with `process_fn`); tasks, arguments and results
            cross a pipe.
        torch_threads: torch threads in each worker process (0: unchanged).
    """

    def __init__(self, size: int, processes: bool, fn: Optional[Callable[..., Any]] = None,
                 torch_threads: int = 1) -> None:
        self.processes = processes
        self.size = size
        if processes:
            self._executor: Executor = ProcessPoolExecutor(
                size, mp_context=multiprocessing.get_context("fork"), initializer=_start_process,
                initargs=(fn, torch_threads))
        else:
            self._executor = ThreadPoolExecutor(size, thread_name_prefix="distrib-data")

    def submit(self, task: Callable[..., Any], *args: Any) -> "Future[Any]":
        """Run ``task(*args)`` on a worker (with processes: a module-level function)."""
        return self._executor.submit(task, *args)

    def shutdown(self) -> None:
        """Cancel what has not started; workers exit once their current task ends (never waits)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def stop_with(self, owner: Any) -> "weakref.finalize":
        """Shut the pool down when ``owner`` is garbage-collected (or at interpreter exit)."""
        return weakref.finalize(owner, WorkerPool.shutdown, self)


def with_element_note(error: BaseException, what: str, position: int) -> BaseException:
    """``error`` (the user's own exception, traceback kept) with a note naming the element."""
    note = f"distrib.data: raised by the {what} on element {position} of its input"
    try:
        notes = error.__notes__  # exists only once a note was added
    except AttributeError:
        notes = []
    if note not in notes:
        error.add_note(note)
    return error
