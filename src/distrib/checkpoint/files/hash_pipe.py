"""sha256 on a thread of its own, beside the reads and writes it checks.

Hashing a multi-gigabyte checkpoint costs about as much as writing it.
``hashlib`` and file I/O both release the GIL, so a `HashPipe` hashes one
buffer while the caller reads or writes the next: the two overlap on two cores.
Buffers are hashed in the order given; `HashPipe.update` blocks when
``depth`` buffers are waiting, which bounds what the pipe holds on to (and
tells a caller reusing buffers when one is free again: after ``update``
returns, every buffer but the last ``depth + 1`` has been hashed).

Example:
    >>> with HashPipe() as digest:
    ...     for chunk in chunks:
    ...         handle.write(chunk)
    ...         digest.update(chunk)
    >>> digest.hexdigest()
"""
from __future__ import annotations

import hashlib
import queue
import threading
from typing import Any, Optional

__all__ = ["HashPipe"]

_END = object()


class HashPipe:
    """A sha256 fed from the caller's thread and computed on its own (a context manager)."""

    def __init__(self, depth: int = 1) -> None:
        self._digest = hashlib.sha256()
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=depth)
        self._result: Optional[str] = None
        self._thread = threading.Thread(target=self._run, name="distrib-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            self._digest.update(item)

    def update(self, data: Any) -> None:
        """Hash ``data`` (bytes or a buffer) after everything given before; it must not change until hashed."""
        self._queue.put(data)

    def hexdigest(self) -> str:
        """The digest of everything given (waits for the thread)."""
        self.close()
        if self._result is None:
            self._result = self._digest.hexdigest()
        return self._result

    def close(self) -> None:
        """End the thread (idempotent); call it even when the caller failed half-way."""
        if self._thread.is_alive():
            self._queue.put(_END)
            self._thread.join()

    def __enter__(self) -> "HashPipe":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
