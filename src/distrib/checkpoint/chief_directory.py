"""One directory written by the chief alone, atomically and verified: what model saving builds on.

`write_directory` is collective under a multi-replica strategy: every worker
calls it with the same files; only the chief's copy lands at ``filepath``
(with ``MANIFEST.json`` and ``COMPLETE``, see `distrib.checkpoint.storage`);
the others write to private temporary directories that are gone on return.

Example:
    >>> write_directory("/tmp/out/ckpt_1", strategy, {"weights.safetensors": data}, {"kind": "weights"})
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Mapping

from distrib.checkpoint import storage
from distrib.strategies import replica_process

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["write_directory"]


def write_directory(filepath: str, strategy: "Strategy", files: Mapping[str, bytes], info: Dict[str, Any],
                    overwrite: bool = True, who: str = "save") -> None:
    """Write ``files`` as one atomic, verified directory at ``filepath``: the chief's copy only.

    Collective under a multi-replica strategy: every worker calls it with the
    same ``files``; the others write to private temporary directories removed
    before returning, and all leave together, so ``filepath`` is complete on
    every worker afterwards.
    """
    if not overwrite:
        taken = bool(strategy.is_chief) and storage.exists(filepath)
        if strategy.multi_replica:
            taken = strategy.collective.agree_any(taken)
        if taken:
            raise FileExistsError(f"{who}: {filepath} exists; pass overwrite=True or choose another path")
    write_path = storage.write_path_for(filepath, strategy)
    try:
        with storage.AtomicDirectory(write_path, info=info) as directory:
            for name, data in files.items():
                directory.write_bytes(name, data)
    finally:
        storage.remove_write_path(filepath, write_path)
    if strategy.multi_replica:
        strategy.barrier()
    else:  # a one-replica strategy in a local-replica process: see distrib.strategies.replica_process
        replica_process.settle()
