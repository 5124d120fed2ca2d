"""Where each worker writes: the chief to the real path, the others to private temp dirs.

Under a multi-worker strategy every worker runs the same save code (saving
may involve collectives), but only the chief's files may land at the target.
This replaces the hand-written ``write_filepath``/``_get_temp_dir`` of
TensorFlow's multi-worker tutorials.

Example:
    >>> with worker_write_path("/ckpts/ckpt-3") as p:   # the chief: "/ckpts/ckpt-3"
    ...     write_checkpoint(p)                          # others: /tmp/distrib-workertemp-1-XXXX/ckpt-3
    ... # the non-chief's temporary directory is gone here
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import TYPE_CHECKING, Iterator, Union

from distrib.checkpoint.files.fs import remove
from distrib.strategies.checkpoint_role import CheckpointRole

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["write_path_for", "remove_write_path", "worker_write_path"]


def _split_base(path: str) -> str:
    return str(path).rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]


def _role(given: "Union[Strategy, CheckpointRole, None]") -> CheckpointRole:
    from distrib.checkpoint.strategy_lookup import resolve_role

    return resolve_role(given, "write_path_for")


def write_path_for(path: str, strategy: "Union[Strategy, CheckpointRole, None]" = None) -> str:
    """Where this worker writes what is meant for ``path``.

    The chief writes to ``path`` itself. Any other worker gets a fresh private
    local temporary directory (``.../distrib-workertemp-<task_id>-XXXX/<basename>``)
    that it must remove after the save with `remove_write_path`. This replaces
    the hand-written ``write_filepath`` of TensorFlow's multi-worker tutorials.

    Example:
        >>> p = write_path_for("/ckpts/ckpt-3")      # "/ckpts/ckpt-3" on the chief
        >>> ...                                       # write to p (every worker: saves may be collective)
        >>> remove_write_path("/ckpts/ckpt-3", p)     # no-op on the chief
    """
    role = _role(strategy)
    if role.is_chief:
        return str(path)
    base = _split_base(path) or "checkpoint"
    tmp = tempfile.mkdtemp(prefix=f"distrib-workertemp-{role.writer_id}-")
    return os.path.join(tmp, base)


def remove_write_path(path: str, write_path: str) -> None:
    """Remove a non-chief worker's temporary directory made by `write_path_for` (nothing on the chief)."""
    if str(write_path) == str(path):
        return
    remove(os.path.dirname(str(write_path)))


@contextlib.contextmanager
def worker_write_path(path: str, strategy: "Union[Strategy, CheckpointRole, None]" = None) -> Iterator[str]:
    """`write_path_for` as a context manager: the temporary path is removed on exit."""
    wp = write_path_for(path, strategy)
    try:
        yield wp
    finally:
        remove_write_path(path, wp)
