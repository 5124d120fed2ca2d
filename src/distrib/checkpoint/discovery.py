"""Finding checkpoints in a directory: `latest_checkpoint` and the numbered listing.

The directory listing is the truth: a checkpoint is a ``<prefix>-<N>`` (or
Keras's ``<prefix>_<N>``, as ``ModelCheckpoint("ckpt_{epoch}")`` writes)
directory with a valid ``COMPLETE`` marker and matching checksums. The newest
is the one with the highest ``N``. A damaged or incomplete candidate (a
truncated file, a flipped bit, a missing marker) is skipped with a
`CheckpointWarning` naming it, and the next older one is tried.

Under a multi-worker strategy (its scope open, or the job strategy this
process joined) `latest_checkpoint` is collective: the chief lists and
verifies, every worker gets the chief's answer (see
`distrib.checkpoint.agreement`), so all restore the same checkpoint however
late a worker looks -- even after the chief has published a newer one.

Example:
    >>> sorted(list_names("/ckpts"))
    ['ckpt-4', 'ckpt-5']                 # ckpt-5 had a bit flipped after it was written
    >>> latest_checkpoint("/ckpts")      # warns: skipping /ckpts/ckpt-5/state.safetensors: contents do not match ...
    '/ckpts/ckpt-4'
"""
from __future__ import annotations

import re
import warnings
from typing import List, Optional, Tuple

from distrib.checkpoint.files import storage
from distrib.checkpoint.agreement import chief_decides, job_role
from distrib.checkpoint.errors import UnsafeFileError
from distrib.checkpoint.retry import with_retries
from distrib.checkpoint.files.state_file import StateFile
from distrib.checkpoint.files.storage import CheckpointWarning, CorruptCheckpointError

__all__ = ["latest_checkpoint", "numbered_checkpoints", "first_valid", "check_payload", "older_siblings"]

_NUMBERED = re.compile(r"^(?P<prefix>.+?)[-_](?P<number>\d+)$")


def numbered_checkpoints(directory: str, prefix: Optional[str] = None) -> List[Tuple[int, str]]:
    """``(N, path)`` of every ``<prefix>-<N>`` entry in ``directory``, oldest first (not verified)."""
    found = []
    for name in storage.list_names(directory):
        m = _NUMBERED.match(name)
        if m is None or name.startswith("."):
            continue
        if prefix is not None and m.group("prefix") != prefix:
            continue
        found.append((int(m.group("number")), name, storage.join(directory, name)))
    found.sort()
    return [(n, path) for n, _, path in found]


def first_valid(paths: List[str]) -> Optional[str]:
    """The first path in ``paths`` that verifies and parses; each damaged one before it is warned about."""
    for path in paths:
        try:
            with_retries(lambda: check_payload(path), f"checking checkpoint {path}")
            return path
        except (CorruptCheckpointError, ValueError, OSError) as exc:
            warnings.warn(f"skipping damaged checkpoint: {exc}", CheckpointWarning, stacklevel=3)
    return None


def check_payload(path: str) -> None:
    """Verify every file's checksum and parse every state file (a forged one can carry good checksums).

    A checkpoint deleted or replaced while it is checked (another process's
    ``max_to_keep`` rotation) fails: its open files still read to the end, so
    each is proven to still be at its path, and the manifest to be unchanged,
    after it was checked.

    Raises:
        CorruptCheckpointError: the checkpoint is incomplete, a file does not
            match, or it was deleted or replaced while it was checked.
        UnsafeFileError: a state file is not a well-formed distrib state.
    """
    manifest = storage.read_manifest(path)
    for name in manifest["files"]:
        with StateFile(path, name, manifest) as checked:
            checked.verify()  # through three 8 MiB buffers: a 6 GiB file costs 24 MiB, not 12 GiB
            if name.endswith(".safetensors"):
                planned = checked.plan()  # header and skeleton, not the tensors
                if not isinstance(planned, dict):  # every state distrib saves in a checkpoint is a dict
                    raise UnsafeFileError(f"{checked.where}: not a Checkpoint or model state (it holds a "
                                          f"{type(planned).__name__})")
            if not checked.still_there():
                raise CorruptCheckpointError(f"{path}: deleted or replaced while it was checked")
    try:
        again = storage.read_manifest(path)
    except CorruptCheckpointError:
        again = None
    if again != manifest:
        raise CorruptCheckpointError(f"{path}: deleted or replaced while it was checked")


def older_siblings(path: str) -> List[str]:
    """The ``<prefix>-<M>`` checkpoints beside ``<prefix>-<N>`` with ``M < N``, newest first."""
    parent, _, name = str(path).rstrip("/").rpartition("/")
    m = _NUMBERED.match(name)
    if not parent or m is None:
        return []
    number = int(m.group("number"))
    try:
        found = numbered_checkpoints(parent, m.group("prefix"))
    except OSError:
        return []
    return [p for n, p in reversed(found) if n < number]


def latest_checkpoint(checkpoint_dir: str, latest_filename: Optional[str] = None,
                      prefix: Optional[str] = None) -> Optional[str]:
    """The newest complete, verified checkpoint in ``checkpoint_dir``, or None.

    Collective under a multi-worker strategy: every worker calls it and gets
    the chief's answer.

    Args:
        checkpoint_dir: local path or fsspec URL of the directory.
        latest_filename: accepted for TF compatibility and ignored (the
            listing, not an index file, decides).
        prefix: only consider ``<prefix>-<N>`` entries (default: any prefix).
    """
    del latest_filename

    def look() -> Optional[str]:
        return first_valid([path for _, path in reversed(numbered_checkpoints(checkpoint_dir, prefix))])

    return chief_decides(job_role(), f"latest_checkpoint({checkpoint_dir!r})", look)
