"""One directory written by the chief alone, atomically and verified: what model saving builds on.

`write_directory` is collective under a multi-replica strategy: every worker
calls it with the same files; only the chief's copy lands at ``filepath``
(with ``MANIFEST.json`` and ``COMPLETE``, see `distrib.checkpoint.files.storage`);
the others write to private temporary directories that are gone on return.
Who writes is the `CheckpointRole` the caller resolved at its entry
(``role=``; resolved here from ``strategy`` when not given).

Example:
    >>> write_directory("/tmp/out/ckpt_1", strategy, {"weights.safetensors": data}, {"kind": "weights"})
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Union

from distrib.checkpoint.files import storage
from distrib.checkpoint.files.background import BackgroundWrite
from distrib.checkpoint.strategy_lookup import resolve_role
from distrib.strategies.checkpoint_role import CheckpointRole
from distrib.strategies.local_replicas import replica_process

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["write_directory", "check_overwrite", "NestedState", "PendingDirectory"]


class NestedState:
    """A file's content given as a nested state (see `distrib.checkpoint.files.format`), written a tensor at a time."""

    __slots__ = ("state",)

    def __init__(self, state: Any) -> None:
        self.state = state


class PendingDirectory:
    """A `write_directory` running in the background; `wait` ends it (collective, like the call)."""

    def __init__(self, write: BackgroundWrite, strategy: "Strategy") -> None:
        self._write, self._strategy = write, strategy

    @property
    def path(self) -> str:
        return self._write.what

    def wait(self) -> None:
        """Wait for the write, then for every worker; raise the write's error, if it failed here."""
        error = self._write.wait()
        _leave_together(self._strategy)
        if error is not None:
            raise error


def check_overwrite(filepath: str, role: CheckpointRole, who: str) -> None:
    """Raise `FileExistsError` on every worker if ``filepath`` exists (the chief looks; collective)."""
    taken = bool(role.is_chief) and storage.exists(filepath)
    if role.multi_replica:
        taken = role.collective.agree_any(taken)  # the chief's answer, for every worker
    if taken:
        raise FileExistsError(f"{who}: {filepath} exists; pass overwrite=True or choose another path")


def write_directory(filepath: str, strategy: "Strategy", files: Mapping[str, Union[bytes, NestedState]],
                    info: Dict[str, Any], overwrite: bool = True, who: str = "save",
                    background: bool = False, role: Optional[CheckpointRole] = None) -> Optional[PendingDirectory]:
    """Write ``files`` as one atomic, verified directory at ``filepath``: the chief's copy only.

    A file given as a `NestedState` is streamed (no copy of the state is made).
    ``background=True`` returns a `PendingDirectory` at once, writing on a
    thread (see `distrib.checkpoint.files.background`): the caller must have copied
    what training may change, and must call its ``wait()`` where every worker does.

    Collective under a multi-replica strategy: every worker calls it with the
    same ``files``; the others write to private temporary directories removed
    before returning, and all leave together, so ``filepath`` is complete on
    every worker afterwards.
    """
    role = role if role is not None else resolve_role(strategy, who)
    if not overwrite:
        check_overwrite(filepath, role, who)

    def write() -> None:
        write_path = storage.write_path_for(filepath, role)
        try:
            with storage.AtomicDirectory(write_path, info=info) as directory:
                for name, data in files.items():
                    if isinstance(data, NestedState):
                        directory.write_state(name, data.state)
                    else:
                        directory.write_bytes(name, data)
        finally:
            storage.remove_write_path(filepath, write_path)

    if background:
        return PendingDirectory(BackgroundWrite(write, what=filepath), strategy)
    write()
    _leave_together(strategy)
    return None


def _leave_together(strategy: "Strategy") -> None:
    if strategy.multi_replica:
        strategy.barrier()
    else:  # a one-replica strategy in a local-replica process: see distrib.strategies.local_replicas.replica_process
        replica_process.settle()
