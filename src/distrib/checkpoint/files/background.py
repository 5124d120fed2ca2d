"""Writing a checkpoint while training goes on: one background write at a time.

A background save has three steps, and only the middle one runs off the
training thread:

1. *stage* (the caller's thread, at the step): the state is taken -- any
   collectives it needs included -- and copied to the CPU
   (`distrib.checkpoint.files.format.copy_state`);
2. *write* (a `BackgroundWrite` thread): the copy is streamed into an
   `distrib.checkpoint.files.storage.AtomicDirectory` and published by its one
   rename, exactly as a blocking save publishes; a crash before the rename
   leaves the previous checkpoint as the newest;
3. *finish* (the caller's thread, at the next save, ``sync()``, a restore or
   the end of training): wait for the thread, then agree with the other
   workers whether every write succeeded, as a blocking save does at once.

The write runs no collective, so it cannot interleave with training's; the
agreement runs where every worker's program reaches it in the same order.

Example:
    >>> pending = BackgroundWrite(lambda: write_files(frozen), what="ckpt-4")
    >>> ...                                  # training steps run here
    >>> error = pending.wait()               # None, or the write's error in one line
"""
from __future__ import annotations

import os
import threading
from typing import Callable, Optional

__all__ = ["BackgroundWrite", "WRITER_NICENESS"]


#: The niceness of a background write's threads: on a machine whose cores training keeps busy, the
#: write (hashing, copying into the page cache) takes what training leaves instead of slowing its steps.
WRITER_NICENESS = 10


def _yield_to_training() -> None:
    """Lower this thread's scheduling priority (Linux: per thread; threads it starts inherit it)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICENESS)
    except (AttributeError, OSError):  # another platform, or not permitted: the write just competes
        pass


class BackgroundWrite:
    """Run ``write`` on a thread of its own; `wait` returns None or the error it raised, in one line.

    The thread is not a daemon: a program that ends normally waits for the
    write to be published rather than leaving it half done.
    """

    def __init__(self, write: Callable[[], None], what: str) -> None:
        self.what = what
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, args=(write,), name=f"distrib-save {what}", daemon=False)
        self._thread.start()

    def _run(self, write: Callable[[], None]) -> None:
        _yield_to_training()
        try:
            write()
        except BaseException as exc:  # handed to the training thread by wait()
            self._error = exc

    @property
    def done(self) -> bool:
        """Whether the write has ended (successfully or not)."""
        return not self._thread.is_alive()

    def wait(self) -> Optional[BaseException]:
        """Block until the write has ended; its exception, if it raised one."""
        self._thread.join()
        return self._error
