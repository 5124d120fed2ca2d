"""Small filesystem helpers over fsspec: one path form for local paths and URLs.

Paths stay in the form the user gave (``/tmp/x``, ``file:///tmp/x``,
``memory://x``, ``s3://bucket/x``); fsspec resolves them.

Example:
    >>> join("memory://run", "ckpt-1", "state.safetensors")
    'memory://run/ckpt-1/state.safetensors'
    >>> atomic_write_bytes("/tmp/run/index", b"{}")     # temp file + fsync + rename
"""
from __future__ import annotations

import hashlib
import os
import uuid
from typing import List, Tuple

import fsspec
from fsspec import AbstractFileSystem

from distrib.errors import DistribError, first_line

__all__ = ["check_backend", "StorageBackendError", "check_writable", "CheckpointDirectoryError", "join", "exists", "remove", "list_names", "atomic_write_bytes", "url_to_fs", "is_local", "sha256",
           "fsync_dir", "write_local"]


class StorageBackendError(DistribError, ImportError):
    """The path's fsspec protocol needs a package that is not installed (or is unknown)."""


class CheckpointDirectoryError(DistribError, OSError):
    """A directory checkpoints must be written to cannot be written (read-only, full, no permission)."""


def check_writable(path: str, who: str) -> None:
    """Fail now, in one line, unless a file can be created in directory ``path`` (made if missing).

    Writes and removes a hidden probe file (``.distrib-write-check-<id>``, which
    no checkpoint listing reads), so a read-only or full filesystem is named
    before training starts, not at the first save an epoch later.

    Raises:
        CheckpointDirectoryError: naming ``who``, the directory and the system's reason.
    """
    fs, p = url_to_fs(path)
    probe = f"{p.rstrip('/')}/.distrib-write-check-{uuid.uuid4().hex[:12]}"
    try:
        fs.makedirs(p, exist_ok=True)
        if is_local(fs):
            write_local(probe, b"\0")
            os.remove(probe)
        else:
            fs.pipe_file(probe, b"\0")
            fs.rm(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise CheckpointDirectoryError(
            f"{who}: cannot write checkpoints to {str(path)!r} ({reason}); nothing was trained: make it "
            f"writable (a read-only mount? a full disk?) or choose another directory") from None


def check_backend(path: str, who: str) -> None:
    """Fail now, in one line, if ``path``'s protocol (``s3://``, ``gs://``) cannot be used here.

    Example:
        >>> check_backend("/tmp/run", "CheckpointManager")      # local paths always work
        >>> try:
        ...     check_backend("nope://bucket/run", "BackupAndRestore")
        ... except StorageBackendError as error:
        ...     print(str(error).split(";")[0])
        BackupAndRestore: 'nope://bucket/run': unknown storage protocol 'nope'
    """
    protocol, _ = fsspec.core.split_protocol(str(path))
    if protocol is None:
        return
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        reason = first_line(exc) if str(exc).strip() else f"{protocol} support is missing"
        raise StorageBackendError(
            f"{who}: {str(path)!r} needs an fsspec backend that is not installed ({reason}); "
            f"install it (e.g. pip install s3fs for s3://, gcsfs for gs://) or use a local path") from None
    except ValueError:
        raise StorageBackendError(
            f"{who}: {str(path)!r}: unknown storage protocol {protocol!r}; use a local path or an "
            f"fsspec URL (s3://, gs://, memory://, ...)") from None


def url_to_fs(path: str) -> Tuple[AbstractFileSystem, str]:
    """The fsspec filesystem and its internal path for a local path or URL."""
    return fsspec.core.url_to_fs(str(path))


def is_local(fs: AbstractFileSystem) -> bool:
    """True for the local filesystem, where rename is atomic and fsync exists."""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return "file" in protocols or "local" in protocols


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def join(path: str, *names: str) -> str:
    """Join ``names`` to a local path or URL, keeping its form (``memory://a`` + ``b`` -> ``memory://a/b``)."""
    out = str(path)
    for n in names:
        out = out.rstrip("/") + "/" + n if "://" in out else os.path.join(out, n)
    return out


def exists(path: str) -> bool:
    """True if a file or directory is at ``path``."""
    fs, p = url_to_fs(path)
    return fs.exists(p)


def remove(path: str) -> None:
    """Remove a file or directory tree; nothing if it does not exist."""
    fs, p = url_to_fs(path)
    try:
        if fs.isdir(p):
            fs.rm(p, recursive=True)
        elif fs.exists(p):
            fs.rm(p)
    except FileNotFoundError:
        pass


def list_names(path: str) -> List[str]:
    """Base names of the entries directly inside directory ``path`` (empty if it does not exist)."""
    fs, p = url_to_fs(path)
    try:
        entries = fs.ls(p, detail=False)
    except FileNotFoundError:
        return []
    return sorted({e.rstrip("/").rsplit("/", 1)[-1] for e in entries if e.rstrip("/") != p.rstrip("/")})


def fsync_dir(path: str) -> None:
    """Flush a local directory's entries (after creating or renaming inside it), where supported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync directories; the rename is still atomic
    finally:
        os.close(fd)


def write_local(path: str, data: bytes) -> None:
    """Write a local file and fsync it."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Replace one small file atomically (temp file + fsync + rename; a single PUT on object stores)."""
    fs, p = url_to_fs(path)
    if is_local(fs):
        parent = os.path.dirname(p) or "."
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f".{os.path.basename(p)}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            write_local(tmp, data)
            os.replace(tmp, p)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        fsync_dir(parent)
    else:
        fs.pipe_file(p, bytes(data))
