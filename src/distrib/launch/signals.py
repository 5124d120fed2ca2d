"""Turn SIGINT, SIGTERM and SIGHUP to the launcher into events its loop handles.

While `catch_signals` is active (main thread only; elsewhere Python cannot
install handlers and it does nothing), each such signal is recorded in an
`InterruptState` and a ``("signal", signum)`` event is put on the launcher's
event queue (a `queue.SimpleQueue`, whose ``put`` is safe inside a signal
handler), which wakes the loop up. A signal the launcher was started with
set to "ignore" (``nohup``, background jobs) stays ignored.
"""
from __future__ import annotations

import queue
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Optional

from distrib import hooks

__all__ = ["HANDLED_SIGNALS", "InterruptState", "catch_signals"]

HANDLED_SIGNALS = tuple(
    s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s is not None
)


@dataclass
class InterruptState:
    """Signals received so far: the first one and how many in all."""

    signum: Optional[int] = None
    count: int = 0


@contextmanager
def catch_signals(events: "queue.SimpleQueue[Any]") -> Iterator[InterruptState]:
    """Record launcher signals in the yielded state instead of dying on them."""
    state = InterruptState()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def on_signal(signum: int, frame: Any) -> None:
        if state.signum is None:
            state.signum = signum
        state.count += 1
        events.put(("signal", signum))

    previous: Dict[int, Any] = {}
    for signum in HANDLED_SIGNALS:
        old = signal.getsignal(signum)
        if old == signal.SIG_IGN:
            continue
        previous[signum] = signal.SIG_DFL if old is None else old
        hooks.install_signal_handler(signum, on_signal)
    try:
        yield state
    finally:
        for signum, old in previous.items():
            hooks.restore_signal_handler(signum, old)
