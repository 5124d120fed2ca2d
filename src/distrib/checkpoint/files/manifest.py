"""A checkpoint's ``MANIFEST.json`` is untrusted input: parse it strictly, read within bounds.

Whoever can write to the checkpoint directory can forge a manifest (and its
``COMPLETE`` checksum with it). `parse_manifest` accepts only the shape
distrib writes, and `read_bounded` never reads more than the manifest
promises, so a forged manifest cannot make distrib open a file outside the
checkpoint, read ``/dev/zero`` until memory runs out, or fail with a bare
``KeyError``/``TypeError``/``RecursionError``: every problem is a
`CorruptCheckpointError` naming the checkpoint, and `latest_checkpoint`
moves on to the next older one.

Example:
    >>> check_file_name("/ckpts/ckpt-3", "../../outside/file")
    Traceback (most recent call last):
    ...
    distrib.checkpoint.errors.CorruptCheckpointError: /ckpts/ckpt-3: MANIFEST.json names '../../outside/file', which is not a plain file name inside the checkpoint
"""
from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, BinaryIO, Dict, Tuple

from distrib.checkpoint.errors import CorruptCheckpointError
from distrib.checkpoint.files.fs import is_local, url_to_fs

__all__ = ["MAX_MANIFEST_BYTES", "MAX_FILE_BYTES", "parse_manifest", "check_file_name", "read_bounded",
           "open_checked"]

#: Largest manifest distrib reads (a real one is a few hundred bytes per file).
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
#: Largest single checkpoint file a manifest may declare.
MAX_FILE_BYTES = 1 << 40
_MAX_FILES = 100_000
_CHUNK = 8 * 1024 * 1024
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_RESERVED = ("MANIFEST.json", "COMPLETE")


def _corrupt(path: str, why: str) -> Exception:
    return CorruptCheckpointError(f"{path}: {why}")


def check_file_name(path: str, name: Any) -> str:
    """``name`` if it is a plain file name inside the checkpoint, else `CorruptCheckpointError`."""
    if (not isinstance(name, str) or not name or name in (".", "..") or name.startswith(".")
            or "/" in name or "\\" in name or "\x00" in name or name in _RESERVED
            or os.path.isabs(name) or len(name) > 255):
        raise _corrupt(path, f"MANIFEST.json names {name!r}, which is not a plain file name inside "
                             f"the checkpoint")
    return name


def parse_manifest(path: str, data: bytes, expected_format: str) -> Dict[str, Any]:
    """The manifest in ``data``, checked to have exactly the shape distrib writes.

    Raises:
        CorruptCheckpointError: not JSON, nested too deeply, wrong types, a
            file name that leaves the checkpoint, a bad size or checksum field.
    """
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise _corrupt(path, f"MANIFEST.json is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(manifest, dict):
        raise _corrupt(path, f"MANIFEST.json holds a {type(manifest).__name__}, not an object")
    if manifest.get("format") != expected_format:
        fmt = manifest.get("format")
        raise _corrupt(path, f"not a distrib checkpoint (manifest format "
                             f"{fmt if isinstance(fmt, (str, int, float, type(None))) else '?'!r})")
    files = manifest.get("files")
    if not isinstance(files, dict) or len(files) > _MAX_FILES:
        raise _corrupt(path, "MANIFEST.json has no valid 'files' object")
    for name, entry in files.items():
        check_file_name(path, name)
        if not isinstance(entry, dict):
            raise _corrupt(path, f"MANIFEST.json entry for {name!r} is not an object")
        size, digest = entry.get("size"), entry.get("sha256")
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_FILE_BYTES:
            raise _corrupt(path, f"MANIFEST.json gives {name!r} an invalid size {size!r:.40}")
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise _corrupt(path, f"MANIFEST.json gives {name!r} an invalid sha256")
    created = manifest.get("created", 0.0)
    if isinstance(created, bool) or not isinstance(created, (int, float)):
        raise _corrupt(path, "MANIFEST.json has an invalid 'created' time")
    if not isinstance(manifest.get("info", {}), dict):
        raise _corrupt(path, "MANIFEST.json has an invalid 'info' (not an object)")
    return manifest


def open_checked(path: str, name: str) -> Tuple[BinaryIO, int]:
    """File ``name`` of checkpoint ``path`` opened for reading, and its size now.

    On a local filesystem the file must be a regular file whose real path lies
    inside the checkpoint's real path: a symlink to ``/etc/hostname`` or
    ``/dev/zero`` is refused. The caller closes the handle.

    Raises:
        FileNotFoundError: there is no such file.
        CorruptCheckpointError: the file is not a regular file inside the checkpoint.
    """
    fs, root = url_to_fs(path)
    target = os.path.join(root.rstrip("/"), name)
    if is_local(fs):
        real_root = os.path.realpath(root)
        real = os.path.realpath(target)
        if os.path.commonpath([real_root, real]) != real_root:
            raise _corrupt(path, f"{name} is a link that leaves the checkpoint (to {real})")
        handle = open(real, "rb")  # noqa: SIM115 - returned to the caller
        mode = os.fstat(handle.fileno())
        if not stat.S_ISREG(mode.st_mode):
            handle.close()
            raise _corrupt(path, f"{name} is not a regular file")
        return handle, mode.st_size
    handle = fs.open(target, "rb")
    size = getattr(handle, "size", None)  # fsspec file handles: only some carry a size
    return handle, int(size) if isinstance(size, int) else int(fs.size(target))


def read_bounded(path: str, name: str, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of file ``name`` in checkpoint ``path`` (so overlong shows).

    The file is opened by `open_checked` (a regular file inside the checkpoint).

    Raises:
        FileNotFoundError: there is no such file.
        CorruptCheckpointError: the file is not a regular file inside the checkpoint.
    """
    handle, _ = open_checked(path, name)
    with handle:
        return _read_at_most(handle, limit + 1)


def _read_at_most(handle: Any, n: int) -> bytes:
    """Up to ``n`` bytes, in chunks: a size claimed by a file's manifest is never allocated up front."""
    chunks, left = [], n
    while left > 0:
        chunk = handle.read(min(left, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
