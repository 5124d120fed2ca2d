"""Atomic, verified checkpoint directories on any fsspec filesystem.

A committed checkpoint is a directory holding its data files, a
``MANIFEST.json`` recording every file's size and sha256, and a ``COMPLETE``
marker holding the sha256 of the manifest::

    ckpt-3/
      state.safetensors
      MANIFEST.json     {"format": "distrib.checkpoint", "created": ..., "info": {...},
                         "files": {"state.safetensors": {"sha256": ..., "size": ...}}}
      COMPLETE          sha256 of MANIFEST.json

`AtomicDirectory` makes a save all-or-nothing:

* On filesystems with rename (local disks, ``file://``), files go into a
  hidden sibling ``.ckpt-3.tmp-<id>/``, are fsynced, the manifest and marker
  are written, and ONE ``rename`` publishes the directory. A crash at any
  point leaves either no ``ckpt-3`` or a complete one.
* On object stores without rename (``s3://``, ``gs://``, ``memory://``), files
  are written in place and the ``COMPLETE`` marker is written last; a
  directory without a valid marker is never loaded.

`verify` (and `is_complete`) recompute every checksum, so a truncated file,
a flipped bit or a missing marker is detected before anything is loaded.

Example:
    >>> with AtomicDirectory("memory://run/ckpt-1") as d:
    ...     d.write_bytes("state.safetensors", dumps_state(model.state_dict()))
    >>> is_complete("memory://run/ckpt-1")
    True
    >>> with AtomicDirectory("memory://run/ckpt-2") as d:
    ...     d.write_bytes("state.safetensors", b"...")
    ...     raise KeyboardInterrupt              # interrupted before commit
    >>> exists("memory://run/ckpt-2")
    False

The path helpers (`join`, `exists`, `remove`, `list_names`,
`atomic_write_bytes`) come from `distrib.checkpoint.files.fs` and the per-worker
paths (`write_path_for`, ...) from `distrib.checkpoint.worker_paths`, the
error classes (`CorruptCheckpointError`, ...) from `distrib.checkpoint.errors`;
all are re-exported here.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from typing import Any, BinaryIO, Callable, Dict, Optional

from distrib.checkpoint.errors import CheckpointNotFoundError, CheckpointWarning, CorruptCheckpointError
from distrib.checkpoint.files.fs import (atomic_write_bytes, exists, fsync_dir, is_local, join, list_names, remove,
                                   sha256, url_to_fs, write_local)
from distrib.checkpoint.files.format import encode_state
from distrib.checkpoint.files.hash_pipe import HashPipe
from distrib.checkpoint.files.manifest import MAX_MANIFEST_BYTES, check_file_name, parse_manifest, read_bounded
from distrib.checkpoint.files.safetensors_io import write_tensors
from distrib.checkpoint.files.state_file import read_state_verified, verify_file
from distrib.checkpoint.worker_paths import remove_write_path, worker_write_path, write_path_for

__all__ = [
    "MANIFEST_NAME",
    "MARKER_NAME",
    "CorruptCheckpointError",
    "CheckpointNotFoundError",
    "CheckpointWarning",
    "AtomicDirectory",
    "atomic_write_bytes",
    "verify",
    "is_complete",
    "read_manifest",
    "read_verified",
    "read_state_verified",
    "verify_file",
    "exists",
    "remove",
    "remove_checkpoint",
    "remove_stale_temporaries",
    "list_names",
    "join",
    "write_path_for",
    "remove_write_path",
    "worker_write_path",
]

MANIFEST_NAME = "MANIFEST.json"
MARKER_NAME = "COMPLETE"
_FORMAT = "distrib.checkpoint"


def remove_checkpoint(path: str) -> None:
    """Delete a checkpoint directory so that it never looks complete while half deleted.

    Local: one rename to a hidden name, then the tree is removed. Object
    stores: the ``COMPLETE`` marker goes first, then the rest.
    """
    fs, p = url_to_fs(path)
    p = p.rstrip("/")
    if not fs.exists(p):
        return
    if is_local(fs):
        hidden = os.path.join(os.path.dirname(p), f".{os.path.basename(p)}.del-{uuid.uuid4().hex[:12]}")
        os.rename(p, hidden)
        fs.rm(hidden, recursive=True)
        return
    marker = os.path.join(p, MARKER_NAME)
    if fs.exists(marker):
        fs.rm(marker)
    remove(path)


def remove_stale_temporaries(directory: str, prefix: str) -> None:
    """Remove hidden leftovers (``.{prefix}-N.tmp-*``, ``.old-*``, ``.del-*``) of interrupted writes.

    Call only where no other writer is active (the chief, before it saves).
    """
    for name in list_names(directory):
        if name.startswith(f".{prefix}-") and any(t in name for t in (".tmp-", ".old-", ".del-")):
            remove(join(directory, name))


# ----------------------------------------------------------------- writing
class AtomicDirectory:
    """Write a checkpoint directory that becomes visible complete or not at all.

    Use as a context manager: leaving the block normally commits, an
    exception aborts (the partial files are removed and ``path`` is untouched
    on filesystems with rename). An existing directory at ``path`` is replaced.

    Args:
        path: the final directory, a local path or fsspec URL.
        info: JSON-serialisable facts recorded in the manifest (e.g. the step).
    """

    def __init__(self, path: str, info: Optional[Dict[str, Any]] = None) -> None:
        self.path = str(path).rstrip("/")
        self.info = dict(info or {})
        self._fs, self._final = url_to_fs(self.path)
        self._atomic_rename = is_local(self._fs)
        parent, base = os.path.split(self._final)
        self._token = uuid.uuid4().hex[:12]
        self._work = os.path.join(parent, f".{base}.tmp-{self._token}") if self._atomic_rename else self._final
        self._files: Dict[str, Dict[str, Any]] = {}
        self._state = "new"

    def __enter__(self) -> "AtomicDirectory":
        self.open()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def open(self) -> None:
        if self._state != "new":
            raise RuntimeError(f"{self.path}: AtomicDirectory can be opened once")
        if not self._atomic_rename and self._fs.exists(self._final):
            # Without rename the old directory must go first; its marker goes first of all
            # so that it is never seen complete with half-replaced files.
            self._remove_marker(self._final)
            self._fs.rm(self._final, recursive=True)
        self._fs.makedirs(self._work, exist_ok=True)
        self._state = "open"

    def write_bytes(self, name: str, data: bytes) -> str:
        """Write one file into the directory; returns its final path."""
        data = bytes(data)

        def produce(handle: BinaryIO, on_write: Callable[[Any], None]) -> int:
            handle.write(data)
            on_write(data)
            return len(data)
        return self.write_with(name, produce)

    def write_state(self, name: str, state: Any) -> str:
        """Write a nested state (see `distrib.checkpoint.files.format`) as file ``name``, a tensor at a time.

        Nothing the size of the state is built in memory: each tensor goes from
        its own memory to the file while the file's sha256 is computed.
        Returns the file's final path.
        """
        tensors, metadata = encode_state(state)
        return self.write_with(name, lambda handle, on_write: write_tensors(handle, tensors, metadata, on_write))

    def write_with(self, name: str, produce: Callable[[BinaryIO, Callable[[Any], None]], int]) -> str:
        """Write file ``name`` with ``produce(handle, on_write)``, which returns the bytes it wrote and
        passes each buffer to ``on_write`` (to hash it). Returns the file's final path."""
        self._check_writable(name)
        target = os.path.join(self._work, name)
        with HashPipe() as digest:  # hashed on its own thread while the bytes are written
            if self._atomic_rename:
                with open(target, "wb") as handle:
                    size = produce(handle, digest.update)
                    handle.flush()
                    os.fsync(handle.fileno())
            else:
                with self._fs.open(target, "wb") as handle:
                    size = produce(handle, digest.update)
            self._files[name] = {"sha256": digest.hexdigest(), "size": int(size)}
        return join(self.path, name)

    def _check_writable(self, name: str) -> None:
        if self._state != "open":
            raise RuntimeError(f"{self.path}: writing outside an open AtomicDirectory")
        if not name or "/" in name or "\\" in name or name in (MANIFEST_NAME, MARKER_NAME) or name.startswith("."):
            raise ValueError(f"{self.path}: invalid checkpoint file name {name!r}")

    def commit(self) -> str:
        """Write manifest and marker, then publish the directory; returns its path."""
        if self._state != "open":
            raise RuntimeError(f"{self.path}: commit of an AtomicDirectory that is {self._state}")
        manifest = {"format": _FORMAT, "version": 1, "created": time.time(), "files": self._files, "info": self.info}
        mbytes = json.dumps(manifest, indent=1, sort_keys=True).encode()
        if self._atomic_rename:
            write_local(os.path.join(self._work, MANIFEST_NAME), mbytes)
            write_local(os.path.join(self._work, MARKER_NAME), sha256(mbytes).encode())
            fsync_dir(self._work)
            self._publish()
        else:
            self._fs.pipe_file(os.path.join(self._work, MANIFEST_NAME), mbytes)
            self._fs.pipe_file(os.path.join(self._work, MARKER_NAME), sha256(mbytes).encode())
        self._state = "committed"
        return self.path

    def _publish(self) -> None:
        parent = os.path.dirname(self._final)
        old = None
        if os.path.exists(self._final):
            old = os.path.join(parent, f".{os.path.basename(self._final)}.old-{self._token}")
            os.rename(self._final, old)
        os.rename(self._work, self._final)
        fsync_dir(parent)
        if old is not None:
            self._fs.rm(old, recursive=True)

    def abort(self) -> None:
        """Remove what was written; the final path is left as it was (or absent, without rename)."""
        if self._state == "open":
            with contextlib.suppress(FileNotFoundError, OSError):
                self._remove_marker(self._work)
                self._fs.rm(self._work, recursive=True)
        self._state = "aborted"

    def _remove_marker(self, directory: str) -> None:
        marker = os.path.join(directory, MARKER_NAME)
        if self._fs.exists(marker):
            self._fs.rm(marker)


# ----------------------------------------------------------------- reading
def read_manifest(path: str) -> Dict[str, Any]:
    """The verified manifest of a committed checkpoint (marker present and matching).

    The manifest is untrusted input: see `distrib.checkpoint.files.manifest`.

    Raises:
        CheckpointNotFoundError: nothing is at ``path``.
        CorruptCheckpointError: marker missing, manifest damaged or malformed,
            or the checkpoint is a link that leaves its directory.
    """
    _refuse_escaping_link(path)
    try:
        marker = read_bounded(path, MARKER_NAME, 128).decode(errors="replace").strip()
    except FileNotFoundError:
        fs, p = url_to_fs(path)
        if not fs.exists(p):
            raise CheckpointNotFoundError(
                f"{path}: not found; check the path (on several machines, every task must see "
                f"the filesystem the chief saved to)") from None
        raise CorruptCheckpointError(f"{path}: incomplete checkpoint (no {MARKER_NAME} marker)") from None
    try:
        mbytes = read_bounded(path, MANIFEST_NAME, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise CorruptCheckpointError(f"{path}: damaged checkpoint ({MANIFEST_NAME} missing)") from None
    if len(mbytes) > MAX_MANIFEST_BYTES:
        raise CorruptCheckpointError(f"{path}: {MANIFEST_NAME} is larger than {MAX_MANIFEST_BYTES} bytes")
    if sha256(mbytes) != marker:
        raise CorruptCheckpointError(
            f"{path}: damaged checkpoint ({MANIFEST_NAME} does not match its {MARKER_NAME} checksum)")
    return parse_manifest(path, mbytes, _FORMAT)


def _refuse_escaping_link(path: str) -> None:
    fs, p = url_to_fs(path)
    p = p.rstrip("/")
    if is_local(fs) and os.path.islink(p):
        parent = os.path.realpath(os.path.dirname(p))
        real = os.path.realpath(p)
        if os.path.dirname(real) != parent:
            raise CorruptCheckpointError(
                f"{path}: the checkpoint is a link that leaves its directory (to {real}); refusing it")


def read_verified(path: str, name: str, manifest: Optional[Dict[str, Any]] = None) -> bytes:
    """The bytes of file ``name`` in checkpoint ``path``, checked against the manifest.

    Never reads more than the manifest's size for the file (plus one byte).
    For small files (JSON); a state file is read by `read_state_verified`,
    which never holds the file's bytes whole.

    Raises:
        CorruptCheckpointError: the checkpoint is incomplete, or the file is
            missing, truncated, altered, or not a regular file inside the checkpoint.
    """
    manifest = manifest if manifest is not None else read_manifest(path)
    entry = manifest["files"].get(name)
    if entry is None:
        raise CorruptCheckpointError(f"{path}: checkpoint has no file {name!r}")
    check_file_name(path, name)
    try:
        data = read_bounded(path, name, entry["size"])
    except FileNotFoundError:
        raise CorruptCheckpointError(f"{join(path, name)}: file listed in the manifest is missing") from None
    if len(data) != entry["size"]:
        raise CorruptCheckpointError(
            f"{join(path, name)}: truncated or extended ({len(data)}{'+' if len(data) > entry['size'] else ''} "
            f"bytes, manifest says {entry['size']})")
    if sha256(data) != entry["sha256"]:
        raise CorruptCheckpointError(f"{join(path, name)}: contents do not match the manifest's sha256 (corrupted)")
    return data


def verify(path: str) -> Dict[str, Any]:
    """Check marker, manifest and every file's size and sha256; returns the manifest.

    Raises:
        CorruptCheckpointError: naming the checkpoint and what is wrong.
    """
    manifest = read_manifest(path)
    for name in manifest["files"]:
        verify_file(path, name, manifest)  # streamed: memory bounded by a few buffers, not the file
    return manifest


def is_complete(path: str) -> bool:
    """True if ``path`` is a committed checkpoint whose files all match their checksums."""
    try:
        verify(path)
    except (CorruptCheckpointError, ValueError, OSError):
        return False
    return True
