"""`Checkpoint`: save and restore named training objects (``tf.train.Checkpoint``).

Tracked objects are anything with ``state_dict()``/``load_state_dict()``
(modules, optimizers, metrics, distributed iterators, `Variable`, a nested
`Checkpoint`, `RNGState`) and tensors, which are restored in place. A
checkpoint is one atomic directory (see `distrib.checkpoint.files.storage`) holding
``state.safetensors``; loading never unpickles.

Multi-worker: every worker calls `save`/`write` (the state may be gathered with collectives); the
chief's directory lands at the path, the others write private temporary directories removed at once.
The call returns on every worker after the chief committed, and fails on all if any failed. The
role (`CheckpointRole`, from the strategy: `distrib.checkpoint.strategy_lookup`) is resolved once per
operation at its entry, or given as ``role=`` by the caller that did (docs/checkpoints.md).

Example:
    >>> ckpt = Checkpoint(model=model, optimizer=opt, epoch=Variable(0))
    >>> path = ckpt.save("/ckpts/ckpt")            # "/ckpts/ckpt-1" (numbered by save_counter)
    >>> ckpt.restore(path).assert_consumed()
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional

import torch

from distrib.errors import DistribError, first_line
from distrib.checkpoint.files import storage
from distrib.checkpoint.agreement import chiefs_path
from distrib.checkpoint.files.background import BackgroundWrite
from distrib.checkpoint.discovery import older_siblings
from distrib.checkpoint.errors import CheckpointRestoreError
from distrib.checkpoint.files.format import UnsafeFileError, copy_state
from distrib.checkpoint.files.inplace_restore import restore_in_place, verbatim_tensors
from distrib.checkpoint.load_status import CheckpointLoadStatus
from distrib.checkpoint.optimizer_state import check_optimizer_state
from distrib.checkpoint.options import CheckpointOptions
from distrib.checkpoint.retry import with_retries
from distrib.checkpoint.files.state_file import StateFile
from distrib.checkpoint.files.storage import CheckpointWarning
from distrib.checkpoint.strategy_lookup import known_role, resolve_role, scope_strategy
from distrib.checkpoint.trackable import RoleAware, Trackable
from distrib.checkpoint.variable import Variable
from distrib.strategies.checkpoint_role import CheckpointRole

__all__ = ["Checkpoint", "CheckpointLoadStatus", "CheckpointSaveError", "CheckpointRestoreError", "STATE_FILE"]

STATE_FILE = "state.safetensors"
_SAVE_COUNTER = "save_counter"


class CheckpointSaveError(DistribError, RuntimeError):
    """Writing a checkpoint failed on at least one worker (raised on every worker)."""


def _check_trackable(name: str, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        return
    if isinstance(obj, Trackable) and callable(obj.state_dict) and callable(obj.load_state_dict):
        return
    if isinstance(obj, (int, float, bool)):
        raise TypeError(f"Checkpoint({name}=...): a plain {type(obj).__name__} cannot be restored in place; "
                        f"use distrib.train.Variable({obj!r})")
    raise TypeError(f"Checkpoint({name}=...): {type(obj).__qualname__} has no state_dict()/load_state_dict() "
                    "and is not a tensor")


class Checkpoint(RoleAware):
    """Groups named objects so they are saved and restored together.

    Args:
        **trackables: objects with ``state_dict()``/``load_state_dict()``, or tensors.
    """

    def __init__(self, **trackables: Any) -> None:
        object.__setattr__(self, "_objects", {})
        object.__setattr__(self, "_strategy", scope_strategy())
        object.__setattr__(self, "save_counter", Variable(0, name=_SAVE_COUNTER))
        for name, obj in trackables.items():
            self._track(name, obj)

    # ---------------------------------------------------------- tracking
    def _track(self, name: str, obj: Any) -> None:
        if name == _SAVE_COUNTER or name.startswith("_"):
            raise ValueError(f"Checkpoint: {name!r} is reserved; choose another name")
        _check_trackable(name, obj)
        self._objects[name] = obj

    def _track_internal(self, name: str, obj: Any) -> None:
        """Track an object under a reserved ``_name`` (used by distrib's own helpers)."""
        _check_trackable(name, obj)
        self._objects[name] = obj

    def __getattr__(self, name: str) -> Any:
        objects = self.__dict__.get("_objects", {})
        if name in objects:
            return objects[name]
        raise AttributeError(f"Checkpoint tracks no object named {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_") or name == _SAVE_COUNTER:
            object.__setattr__(self, name, value)
        else:
            self._track(name, value)

    @property
    def tracked(self) -> Dict[str, Any]:
        """The tracked objects by name (a copy)."""
        return dict(self._objects)

    # --------------------------------------------------------- state dict
    def state_dict(self, *, role: Optional[CheckpointRole] = None) -> Dict[str, Any]:
        """Every tracked object's state (tensors as-is) plus ``save_counter``.

        Args:
            role: passed to the objects that take one (`RoleAware`); None: each resolves its own.
        """
        state: Dict[str, Any] = {_SAVE_COUNTER: self.save_counter.state_dict()}
        for name, obj in self._objects.items():
            state[name] = _state_of(obj, role)
        return state

    def load_state_dict(self, state: Dict[str, Any], *, role: Optional[CheckpointRole] = None) -> None:
        """Restore from a `state_dict`; names must match exactly (use `restore` for partial matches).
        ``role``: as for `state_dict`."""
        missing, unused = self._apply(state, "state_dict", role)
        if missing or unused:
            raise CheckpointRestoreError(f"Checkpoint.load_state_dict: missing {missing}, unexpected {unused}")

    def _apply(self, state: Dict[str, Any], where: str,
               role: Optional[CheckpointRole]) -> "tuple[List[str], List[str]]":
        if _SAVE_COUNTER in state:
            self.save_counter.load_state_dict(state[_SAVE_COUNTER])
        missing = [n for n in self._objects if n not in state]
        unused = [n for n in state if n != _SAVE_COUNTER and n not in self._objects]
        for name, obj in self._objects.items():
            if name in state:
                _restore_one(name, obj, state[name], where, role)
        return missing, unused

    # ------------------------------------------------------------- write
    def save(self, file_prefix: str, options: Optional[CheckpointOptions] = None) -> str:
        """Increment `save_counter` and write ``{file_prefix}-{save_counter}``; returns the chief's path
        on every worker (the one written: local replicas' own ``file_prefix`` may differ)."""
        self.save_counter.assign_add(1)
        role = resolve_role(self._strategy, "Checkpoint.save")
        return self.write(f"{str(file_prefix).rstrip('/')}-{int(self.save_counter)}", options=options, role=role)

    def write(self, file_prefix: str, info: Optional[Dict[str, Any]] = None,
              options: Optional[CheckpointOptions] = None, *, role: Optional[CheckpointRole] = None) -> str:
        """Write a checkpoint directory at exactly ``file_prefix`` (atomically); returns the chief's.

        Collective under a multi-worker strategy: every worker must call it.
        With ``options=CheckpointOptions(enable_async=True)`` it returns once
        the state is copied, and a background thread writes and publishes the
        copy (see `distrib.checkpoint.files.background`); the next `write`, `sync`
        or restore waits for it first, so at most one save is in flight. The
        copy is kept, and the next background save copies into it (no new
        allocation, no page faults): a Checkpoint saved in the background
        holds one copy of its state from then on.

        Args:
            file_prefix: the directory to write (this worker's; the chief's is returned).
            info: more entries for the manifest's metadata.
            options: a `CheckpointOptions`.
            role: the role the caller resolved (`save`, `CheckpointManager.save`); None: resolved here.

        Raises:
            CheckpointSaveError: on every worker, if writing failed on any
                worker (for a background save: raised by the call that waits for it).
        """
        background = CheckpointOptions.check(options, "Checkpoint.write").background
        role = role if role is not None else resolve_role(self._strategy, "Checkpoint.write")
        self.sync()
        path = str(file_prefix).rstrip("/")
        state = self.state_dict(role=role)  # may gather across replicas, so before anything can fail locally
        if background:  # the values of this step: training may change the objects now
            state = copy_state(state, reuse=self.__dict__.get("_staging"))  # into the last copy: written by now
            object.__setattr__(self, "_staging", state)
        meta = {"save_counter": int(self.save_counter), "world_size": role.num_replicas_in_sync}
        meta.update(info or {})
        write = _Write(role, path, state, meta)
        if background:
            object.__setattr__(self, "_pending", (BackgroundWrite(write, what=path), write))
        else:
            try:
                write()
            except Exception as exc:  # reported to every worker by _agree
                _agree(role, write.failure(exc), exc)
                raise  # pragma: no cover - _agree raised
            _agree(role, None, None)
        return chiefs_path(role, path, "Checkpoint.write")

    def sync(self) -> None:
        """Wait for this checkpoint's background save, if one is in flight, and check it succeeded.

        Collective under a multi-worker strategy, like `write`.

        Raises:
            CheckpointSaveError: on every worker, if the write failed on any worker.
        """
        pending = self.__dict__.get("_pending")
        if pending is None:
            return
        object.__setattr__(self, "_pending", None)
        thread, write = pending
        exc = thread.wait()
        _agree(write.role, None if exc is None else write.failure(exc), exc)

    # ----------------------------------------------------------- restore
    def restore(self, save_path: Optional[str], *, role: Optional[CheckpointRole] = None) -> CheckpointLoadStatus:
        """Restore every tracked object found in the checkpoint at ``save_path``.

        ``save_path=None`` (what `latest_checkpoint` returns for an empty
        directory) restores nothing; the status's ``assert_consumed`` then fails.

        A damaged checkpoint, or one whose values do not fit the tracked
        objects (a forged skeleton, an optimizer state of the wrong shape), is
        skipped with a `CheckpointWarning` naming it and the reason, and the
        newest older ``<prefix>-<N>`` beside it that restores is used instead
        (``status.path`` says which). Nothing is left half-restored. ``role``:
        the one the caller resolved (`CheckpointManager.restore_or_initialize`);
        None: looked up here (if the chief is unknown, each object resolves its own).

        Raises:
            distrib.checkpoint.files.storage.CorruptCheckpointError: the checkpoint is
                incomplete or damaged and no older one restores.
            CheckpointRestoreError: a saved value does not fit its object and no
                older checkpoint restores.
        """
        if save_path is None:
            return CheckpointLoadStatus(None, [], list(self._objects), [])
        role = role if role is not None else known_role(self._strategy, "Checkpoint.restore")
        path, first_error = str(save_path).rstrip("/"), None
        for candidate in _and_older(path):
            try:
                return self._read_retried(candidate, role)
            except _UNUSABLE as exc:
                first_error = first_error or exc
                _skip(candidate, exc)
        raise first_error

    def _read_retried(self, path: str, role: Optional[CheckpointRole]) -> CheckpointLoadStatus:
        """`read` tried again from the start after a passing storage error (`distrib.checkpoint.retry`)."""
        try:
            return with_retries(lambda: self.read(path, role=role), f"reading checkpoint {path}")
        except OSError as exc:  # a FileNotFoundError too: a file of it vanished while it was read
            raise CheckpointRestoreError(f"{path}: could not be read ({first_line(exc, limit=300)}); the objects "
                                         f"hold part of it unless an older checkpoint restores") from exc

    def read(self, save_path: str, *, role: Optional[CheckpointRole] = None) -> CheckpointLoadStatus:
        """Restore from exactly ``save_path`` (written by `write` or `save`); returns the status.

        All or nothing: if any value does not fit, every object is put back as it
        was. The tensors are read straight into the objects' own (see
        `distrib.checkpoint.files.inplace_restore`); a save of this checkpoint still
        in flight is waited for first. ``role``: as for `restore`.
        """
        role = role if role is not None else known_role(self._strategy, "Checkpoint.read")
        self.sync()
        path = str(save_path).rstrip("/")
        manifest = storage.read_manifest(path)
        outcome: Dict[str, Any] = {}

        def apply(state: Dict[str, Any]) -> None:
            where = "the state before the failed restore" if outcome.get("failed") else path
            try:
                outcome["result"] = self._apply(state, where, role)
            except BaseException:
                outcome["failed"] = True
                raise

        with StateFile(path, STATE_FILE, manifest) as state_file:
            try:
                planned, _ = restore_in_place(state_file, self.state_dict(role=role), self._verbatim_tensors, apply)
            except MemoryError:  # e.g. a forged tensor that fits no tracked object, too large to read
                raise CheckpointRestoreError(
                    f"{path}: not enough memory to read its tensors that fit no tracked object in place "
                    f"(a {manifest['files'][STATE_FILE]['size']}-byte file)") from None
        if not isinstance(planned, dict):
            raise CheckpointRestoreError(f"{path}: not a Checkpoint (its state is a {type(planned).__name__})")
        missing, unused = outcome["result"]
        restored = [n for n in self._objects if n not in missing]
        return CheckpointLoadStatus(path, restored, missing, unused)

    def _verbatim_tensors(self) -> List[torch.Tensor]:
        return [t for obj in self._objects.values() for t in verbatim_tensors(obj)]

    def __repr__(self) -> str:
        return f"Checkpoint({', '.join(self._objects)}; save_counter={int(self.save_counter)})"


class _Write:
    """One worker's part of a save: its files, at the path this worker writes (thread-safe, no collectives)."""

    def __init__(self, role: CheckpointRole, path: str, state: Dict[str, Any], meta: Dict[str, Any]) -> None:
        self.role, self.path, self._state, self._meta = role, path, state, meta
        self._target: Optional[str] = None

    def __call__(self) -> None:
        try:
            with_retries(self._write_once, f"{self.role.who} writing checkpoint {self.path}")
        finally:
            self._state = None  # a background copy is freed as soon as it is written

    def _write_once(self) -> None:
        self._target = None
        try:
            self._target = storage.write_path_for(self.path, self.role)
            with storage.AtomicDirectory(self._target, self._meta) as d:
                d.write_state(STATE_FILE, self._state)
        finally:
            if self._target is not None:
                storage.remove_write_path(self.path, self._target)

    def failure(self, exc: BaseException) -> str:
        return f"{self.role.who} could not write checkpoint {self._target or self.path}: {first_line(exc, limit=400)}"


def _agree(role: CheckpointRole, error: Optional[str], exc: Optional[BaseException]) -> None:
    """Raise `CheckpointSaveError` on every worker if the write failed on any (collective when multi-replica)."""
    if role.multi_replica:
        errors = [e for e in role.collective.all_gather_json(error) if e]
        if errors:
            raise CheckpointSaveError("; ".join(errors)) from exc
    elif error is not None:
        raise CheckpointSaveError(error) from exc


def _state_of(obj: Any, role: Optional[CheckpointRole]) -> Any:
    """``obj``'s state: a tensor itself; under a known ``role``, ``state_dict(role=role)`` where it takes one."""
    if isinstance(obj, torch.Tensor):
        return obj
    if role is not None and isinstance(obj, RoleAware):
        return obj.state_dict(role=role)
    return obj.state_dict()


def _restore_one(name: str, obj: Any, value: Any, where: str, role: Optional[CheckpointRole]) -> None:
    try:
        if isinstance(obj, torch.optim.Optimizer):
            check_optimizer_state(obj, value)
        if isinstance(obj, torch.Tensor):
            if not isinstance(value, torch.Tensor) or value.shape != obj.shape:
                got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(f"saved shape {got} != tracked shape {tuple(obj.shape)}")
            with torch.no_grad():
                obj.copy_(value)
        elif role is not None and isinstance(obj, RoleAware):
            obj.load_state_dict(value, role=role)
        else:
            obj.load_state_dict(value)
    except Exception as exc:
        raise CheckpointRestoreError(f"{where}: cannot restore {name!r}: {first_line(exc, limit=400)}") from exc


_UNUSABLE = (storage.CorruptCheckpointError, UnsafeFileError, CheckpointRestoreError)


def _and_older(path: str) -> Any:
    yield path
    yield from older_siblings(path)  # listed only if ``path`` does not restore


def _skip(path: str, exc: BaseException) -> None:
    warnings.warn(f"skipping checkpoint {path}: {first_line(exc, limit=400)}", CheckpointWarning, stacklevel=3)


