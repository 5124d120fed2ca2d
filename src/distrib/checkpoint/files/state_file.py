"""A checkpoint's state file, checked against its manifest while it streams by.

`read_state_verified` reads a state in ONE pass: every tensor is allocated
at its own size and filled straight from the file while the file's sha256 is
computed; only when the last byte matched the manifest is the state decoded
and returned. Memory: the state itself plus a read buffer or two -- not the two or
three copies of the file that reading it whole, joining and parsing cost.

`StateFile` serves a restore into live objects, which must not change
anything before the file is known to be intact: `StateFile.verify` hashes
the whole file through a few fixed buffers (nothing kept), `StateFile.plan`
decodes the skeleton with `TensorRef` stand-ins instead of data, and
`StateFile.stream_into` then reads each tensor straight into the memory it
restores, and proves the file did not change in between.

Hashing runs on a thread of its own (`distrib.checkpoint.files.hash_pipe`), beside
the reads.

Example:
    >>> manifest = storage.read_manifest("/ckpts/ckpt-3")
    >>> state = read_state_verified("/ckpts/ckpt-3", "state.safetensors", manifest)
    >>> with StateFile("/ckpts/ckpt-3", "state.safetensors", manifest) as f:
    ...     f.verify()                          # sha256 over the file, 8 MiB at a time
    ...     refs = f.plan()                     # the state, with TensorRef(name, shape, dtype) leaves
"""
from __future__ import annotations

import collections
import io
import os
import threading
import time
from typing import Any, BinaryIO, Dict, Mapping, Optional, Tuple

import torch

from distrib.checkpoint.errors import CorruptCheckpointError, UnsafeFileError
from distrib.checkpoint.files.format import decode_state, read_tensors
from distrib.checkpoint.files.fs import is_local, join, url_to_fs
from distrib.checkpoint.files.hash_pipe import HashPipe
from distrib.checkpoint.files.manifest import check_file_name, open_checked
from distrib.checkpoint.files.safetensors_io import CHUNK_BYTES, Header, TensorEntry, read_header

__all__ = ["TensorRef", "StateFile", "read_state_verified", "verify_file"]


class TensorRef:
    """A stand-in for a tensor of the file not read yet: which one, its shape and dtype."""

    __slots__ = ("entry", "as_numpy")

    def __init__(self, entry: TensorEntry, as_numpy: bool = False) -> None:
        self.entry = entry
        self.as_numpy = as_numpy

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def shape(self) -> Tuple[int, ...]:
        return self.entry.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.entry.dtype

    def numpy(self) -> "TensorRef":
        """The reference as the skeleton's ``ndarray`` node asks for it."""
        return TensorRef(self.entry, as_numpy=True)

    def __repr__(self) -> str:
        return f"TensorRef({self.name!r}, {tuple(self.shape)}, {self.dtype})"


def _entry_of(path: str, name: str, manifest: Mapping[str, Any]) -> Dict[str, Any]:
    entry = manifest["files"].get(name)
    if entry is None:
        raise CorruptCheckpointError(f"{path}: checkpoint has no file {name!r}")
    check_file_name(path, name)
    return entry


class StateFile:
    """File ``name`` of the checkpoint at ``path``, opened to be checked and read (a context manager).

    Raises (on entry):
        CorruptCheckpointError: the file is not in the manifest, missing, not
            a regular file inside the checkpoint, or not the size the manifest says.
    """

    def __init__(self, path: str, name: str, manifest: Mapping[str, Any]) -> None:
        self.path, self.name = str(path), name
        self.where = join(self.path, name)
        self._entry = _entry_of(self.path, name, manifest)
        self._handle: Optional[BinaryIO] = None
        self._header: Optional[Header] = None
        self._identity: Optional[Tuple[int, ...]] = None

    def __enter__(self) -> "StateFile":
        try:
            handle, size = open_checked(self.path, self.name)
        except FileNotFoundError:
            raise CorruptCheckpointError(f"{self.where}: file listed in the manifest is missing") from None
        if size != self._entry["size"]:
            handle.close()
            raise CorruptCheckpointError(
                f"{self.where}: truncated or extended ({size} bytes, manifest says {self._entry['size']})")
        self._handle = handle
        self._identity = _identity(handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    @property
    def _file(self) -> BinaryIO:
        if self._handle is None:
            raise RuntimeError(f"{self.where}: StateFile used outside its with-block")
        return self._handle

    # ------------------------------------------------------------ checks
    def still_there(self) -> bool:
        """Whether the checkpoint's path still names the file this handle reads (not deleted or replaced).

        A file deleted (or renamed away) while it is open still reads to the
        end: a check that verified it proves nothing about the path. Local
        files compare their device and inode; others ask the filesystem.
        """
        fs, root = url_to_fs(self.path)
        target = os.path.join(root.rstrip("/"), self.name)
        try:
            if is_local(fs):
                now, held = os.stat(target), os.fstat(self._file.fileno())
                return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
            return bool(fs.exists(target))
        except OSError:
            return False

    def verify(self) -> None:
        """Hash the whole file through a few fixed buffers and compare with the manifest.

        A local file this process verified before, and that has not been
        written since (same inode, size, modification and change times), is
        not hashed again: `latest_checkpoint` followed by a restore reads the
        file once to check it.

        Raises:
            CorruptCheckpointError: the contents do not match (or the file changed size).
        """
        if self._identity is not None and _VERIFIED.get(self._identity) == self._entry["sha256"]:
            return
        self._file.seek(0)
        with HashPipe() as digest:
            size = _hash_span(self._file, None, digest)
            self._check(digest.hexdigest(), size)
        if self._identity is not None and self._identity == _identity(self._file):
            _VERIFIED.put(self._identity, self._entry["sha256"])

    def _check(self, digest: str, size: int) -> None:
        if size != self._entry["size"]:
            raise CorruptCheckpointError(f"{self.where}: truncated or extended while it was read ({size} bytes, "
                                         f"manifest says {self._entry['size']})")
        if digest != self._entry["sha256"]:
            raise CorruptCheckpointError(f"{self.where}: contents do not match the manifest's sha256 (corrupted)")

    @property
    def header(self) -> Header:
        """The file's checked safetensors header (read once)."""
        if self._header is None:
            self._file.seek(0)
            self._header = read_header(self._file, self._entry["size"], self.where)
        return self._header

    def plan(self) -> Any:
        """The state with a `TensorRef` wherever a tensor (or numpy array) will go; reads no tensor data.

        Raises:
            UnsafeFileError: the header or the skeleton is malformed or forged.
        """
        refs = {name: TensorRef(entry) for name, entry in self.header.entries.items()}
        return decode_state(self.header.metadata, refs, self.where)

    # ------------------------------------------------------------ reading
    def read(self, names: Any) -> Dict[str, torch.Tensor]:
        """The tensors named, each read into a new CPU tensor (no hashing: `verify` first)."""
        out = {}
        for name in names:
            entry = self.header.entries[name]
            out[name] = entry.empty()
            entry.read_into(self._file, out[name], self.header.data_start)
        return out

    def read_all(self, device: Any = "cpu") -> Any:
        """The whole state, in one pass: each tensor read at its size while the file is hashed.

        Raises:
            CorruptCheckpointError: the file does not match the manifest (named
                as damage even when the damage also makes it unreadable).
            UnsafeFileError: the file is intact but not a distrib state file.
        """
        handle = self._file
        handle.seek(0)
        with HashPipe() as digest:
            try:
                header = read_header(handle, self._entry["size"], self.where, digest.update)
                tensors = read_tensors(handle, header, digest.update, device)
                size = header.data_start + sum(e.nbytes for e in header.entries.values())
                size += _hash_span(handle, None, digest)  # nothing, unless the file grew since it was opened
            except UnsafeFileError:
                digest.close()
                self.verify()  # damage is named as damage, not as a malformed file
                raise
            self._check(digest.hexdigest(), size)
        return decode_state(header.metadata, tensors, self.where)

    def stream_into(self, targets: Mapping[str, torch.Tensor]) -> None:
        """Read the file once, front to back, writing each tensor named in ``targets`` into its target.

        A contiguous CPU target of the entry's dtype is filled in place; any
        other (a GPU tensor, a strided view) through one buffer of its size.
        That the file is still what `verify` checked is proven at the end: for
        a local file by its unchanged inode times (any write changes its
        change time, which no one can set back), else by hashing it again.

        Raises:
            CorruptCheckpointError: the file no longer matches the manifest (it
                changed since `verify`): the targets then hold part of it.
        """
        handle = self._file
        local = self._identity is not None
        with HashPipe() as digest:
            handle.seek(0)
            head = handle.read(self.header.data_start)
            digest.update(head)
            size = len(head)
            for entry in self.header.in_file_order():
                target = targets.get(entry.name)
                if target is None:
                    if local:
                        handle.seek(entry.nbytes, 1)
                        size += entry.nbytes
                    else:
                        size += _hash_span(handle, entry.nbytes, digest)
                    continue
                direct = target.device.type == "cpu" and target.is_contiguous() and target.dtype == entry.dtype
                buffer = target.detach() if direct else entry.empty()
                entry.read_into(handle, buffer, self.header.data_start, None if local else digest.update, seek=False)
                size += entry.nbytes
                if not direct:
                    with torch.no_grad():
                        target.copy_(buffer.view(target.shape))
            if local:
                digest.close()
                if _identity(handle) != self._identity:
                    self._hash_again(handle)  # renamed or unlinked (the chief's rotation) changes times too
                return
            size += _hash_span(handle, None, digest)
            self._check(digest.hexdigest(), size)


    def _hash_again(self, handle: BinaryIO) -> None:
        """A local file whose times moved while it was read: hash it whole; only a change of its contents fails.

        Renaming or unlinking a file (another worker's ``max_to_keep`` rotation, a
        checkpoint published under its final name) changes its change time but
        not one byte of what an open handle reads.
        """
        with HashPipe() as digest:
            handle.seek(0)
            size = _hash_span(handle, None, digest)
            try:
                self._check(digest.hexdigest(), size)
            except CorruptCheckpointError:
                raise CorruptCheckpointError(f"{self.where}: written to while it was read") from None


class _Verified:
    """Local files this process hashed and found intact, by identity (a bounded, thread-safe memo)."""

    def __init__(self, limit: int = 256) -> None:
        self._limit = limit
        self._digests: "collections.OrderedDict[Tuple[int, ...], str]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, identity: Tuple[int, ...]) -> Optional[str]:
        with self._lock:
            return self._digests.get(identity)

    def put(self, identity: Tuple[int, ...], digest: str) -> None:
        with self._lock:
            self._digests[identity] = digest
            while len(self._digests) > self._limit:
                self._digests.popitem(last=False)


_VERIFIED = _Verified()


#: A file changed less than this long ago is hashed, never trusted by its times: some filesystems keep
#: times in ticks of a few milliseconds, so a second write within one tick would not move them.
SETTLED_NS = 2_000_000_000


def _identity(handle: BinaryIO) -> Optional[Tuple[int, ...]]:
    """A local file's inode, size and modification and change times, if it changed long enough ago.

    None for other filesystems and for a file changed in the last `SETTLED_NS`.
    """
    try:
        info = os.fstat(handle.fileno())
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None
    if time.time_ns() - max(info.st_ctime_ns, info.st_mtime_ns) < SETTLED_NS:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _hash_span(handle: BinaryIO, length: Optional[int], digest: HashPipe) -> int:
    """Hash ``length`` bytes (None: to the end) from ``handle``; returns the bytes seen.

    Reads into three buffers in turn: the pipe (depth 1) has hashed a buffer
    by the time it is filled again.
    """
    size = min(CHUNK_BYTES, length) if length is not None else CHUNK_BYTES
    buffers = [memoryview(bytearray(size)) for _ in range(3)]
    seen, turn = 0, 0
    while length is None or seen < length:
        view = buffers[turn % len(buffers)]
        want = len(view) if length is None else min(len(view), length - seen)
        n = handle.readinto(view[:want]) if hasattr(handle, "readinto") else _copy_into(handle, view[:want])
        if not n:
            break
        digest.update(view[:n])
        seen += n
        turn += 1
    return seen


def _copy_into(handle: BinaryIO, view: memoryview) -> int:
    data = handle.read(len(view))
    view[:len(data)] = data
    return len(data)


def verify_file(path: str, name: str, manifest: Mapping[str, Any]) -> None:
    """Check file ``name`` of checkpoint ``path`` against the manifest in bounded memory.

    Raises:
        CorruptCheckpointError: missing, the wrong size, or altered.
    """
    with StateFile(path, name, manifest) as f:
        f.verify()


def read_state_verified(path: str, name: str, manifest: Mapping[str, Any], device: Any = "cpu") -> Any:
    """The state in file ``name`` of checkpoint ``path``, read in one pass and checked against the manifest.

    Raises:
        CorruptCheckpointError: the file is missing, the wrong size or altered
            (reported before any problem with its contents).
        UnsafeFileError: the file is intact but is not a distrib state file.
    """
    with StateFile(path, name, manifest) as f:
        return f.read_all(device)
