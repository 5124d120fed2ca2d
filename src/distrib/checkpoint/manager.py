"""`CheckpointManager`: numbered saves in one directory, keeping the last few.

``directory`` (the chief's) holds one atomic directory per checkpoint (``ckpt-7/``) and a
JSON index, ``checkpoint``; the listing decides what exists, the index only remembers which
checkpoints ``keep_checkpoint_every_n_hours`` preserved. Multi-worker: creating a manager, `save`,
`sync` and `restore_or_initialize` are collective; the chief lists, writes and deletes, and every
worker gets its view. Each resolves the role once at its entry and hands it to the `Checkpoint`
as ``role=`` (the call sequences and the directory: docs/checkpoints.md).

Example (TensorFlow's multi-worker custom-loop tutorial, without any chief logic):
    >>> epoch = distrib.train.Variable(0)
    >>> ckpt = distrib.train.Checkpoint(model=model, epoch=epoch)
    >>> manager = distrib.train.CheckpointManager(ckpt, "/ckpts", max_to_keep=1)
    >>> manager.restore_or_initialize()          # None on a fresh start
    >>> while int(epoch) < 3:
    ...     train_one_epoch()
    ...     epoch.assign_add(1)
    ...     manager.save()                       # '/ckpts/ckpt-1', then ckpt-2 replaces it, ...
"""
from __future__ import annotations

import json
import time
import warnings
from typing import Any, Callable, Dict, List, Optional

from distrib.checkpoint.files import storage
from distrib.checkpoint.agreement import AgreementError, chief_decides
from distrib.checkpoint.checkpoint import Checkpoint
from distrib.checkpoint.discovery import first_valid, numbered_checkpoints
from distrib.checkpoint.files.format import freeze_state, loads_state
from distrib.checkpoint.files.fs import check_backend
from distrib.checkpoint.retry import best_effort
from distrib.checkpoint.options import CheckpointOptions
from distrib.checkpoint.files.storage import CheckpointWarning
from distrib.checkpoint.strategy_lookup import known_role, resolve_role, scope_strategy
from distrib.comm.elastic_abilities import elastic_abilities
from distrib.strategies.checkpoint_role import CheckpointRole

__all__ = ["CheckpointManager", "INDEX_FILE", "PEER_SNAPSHOT"]

INDEX_FILE = "checkpoint"
#: What `CheckpointManager.restore_or_initialize` returns in an elastic replacement (restored from a peer).
PEER_SNAPSHOT = "<in-memory snapshot of a surviving worker>"


_MAX_INDEX_BYTES = 1024 * 1024


def _checked_index(index: Any) -> Dict[str, Any]:
    """``index`` if it has the shape `_write_index` writes (the fields read back), else ValueError."""
    if not isinstance(index, dict):
        raise ValueError(f"holds a {type(index).__name__}, not an object")
    preserved = index.get("preserved", [])
    if not isinstance(preserved, list) or not all(isinstance(n, str) for n in preserved):
        raise ValueError("'preserved' is not a list of names")
    when = index.get("last_preserved_time", time.time())
    if isinstance(when, bool) or not isinstance(when, (int, float)) or when != when:
        raise ValueError("'last_preserved_time' is not a number")
    return {"preserved": preserved, "last_preserved_time": float(when)}


def _number(path: str) -> int:
    """The ``N`` of a ``<name>-N`` path (-1 if it has none)."""
    tail = str(path).rstrip("/").rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _value(counter: Any) -> int:
    if counter is None:
        raise ValueError("CheckpointManager: checkpoint_interval needs a step_counter")
    return int(counter() if callable(counter) and not hasattr(counter, "numpy") else counter)


class CheckpointManager:
    """Saves numbered checkpoints of ``checkpoint`` into ``directory``.

    Args:
        checkpoint: the `Checkpoint` to save and restore.
        directory: local path or fsspec URL; the same on every worker.
        max_to_keep: how many recent checkpoints to keep (None keeps all).
        keep_checkpoint_every_n_hours: additionally preserve (never delete) one
            checkpoint per this many hours.
        checkpoint_name: the ``<name>-<N>`` prefix.
        step_counter: a `Variable`, tensor, int-convertible or zero-argument
            callable giving the current step, for ``checkpoint_interval``.
        checkpoint_interval: save only when ``step_counter`` advanced by at
            least this much since the last save.
        init_fn: called by `restore_or_initialize` when there is nothing to restore.
    """

    def __init__(self, checkpoint: Checkpoint, directory: str, max_to_keep: Optional[int],
                 keep_checkpoint_every_n_hours: Optional[float] = None, checkpoint_name: str = "ckpt",
                 step_counter: Any = None, checkpoint_interval: Optional[int] = None,
                 init_fn: Optional[Callable[[], Any]] = None) -> None:
        if max_to_keep is not None and int(max_to_keep) < 1:
            raise ValueError(f"CheckpointManager: max_to_keep must be None or >= 1, got {max_to_keep}")
        if checkpoint_interval is not None and step_counter is None:
            raise ValueError("CheckpointManager: checkpoint_interval needs a step_counter")
        if not checkpoint_name or "/" in checkpoint_name or checkpoint_name.startswith("."):
            raise ValueError(f"CheckpointManager: invalid checkpoint_name {checkpoint_name!r}")
        check_backend(str(directory), "CheckpointManager")
        self._checkpoint = checkpoint
        self._strategy = scope_strategy() or (checkpoint._strategy if isinstance(checkpoint, Checkpoint) else None)
        self._directory = str(directory).rstrip("/")
        self._max_to_keep = None if max_to_keep is None else int(max_to_keep)
        self._keep_hours = keep_checkpoint_every_n_hours
        self._name = checkpoint_name
        self._step_counter = step_counter
        self._interval = checkpoint_interval
        self._init_fn = init_fn
        #: `save` also keeps an in-memory snapshot under elastic training (see `keep_snapshot`).
        self.snapshot_on_save = True
        #: Whether `keep_snapshot` kept one (elastic training is on).
        self.snapshot_kept = False
        #: What elastic snapshots hold (default: ``checkpoint``); a replacement restores it from a peer.
        self._snapshot_checkpoint = checkpoint
        self._last_step: Optional[int] = None
        self._pending: Optional[str] = None  # a background save not yet waited for
        index = self._read_index()
        self._preserved: List[str] = [storage.join(self._directory, n) for n in index.get("preserved", [])
                                      if "/" not in n and "\\" not in n and n not in ("", ".", "..")]
        self._last_preserved = float(index.get("last_preserved_time", time.time()))
        self._times: Dict[str, float] = {}
        self._checkpoints: List[str] = []
        self._latest: Optional[str] = None
        self._scan()

    # ------------------------------------------------------------- state
    def _scan(self) -> None:
        """Recover the kept checkpoints from the listing: the chief's view, on every worker."""
        role = known_role(self._strategy, "CheckpointManager")  # None: no strategy in a multi-process job,
        # save() names the problem
        view = chief_decides(role, f"the checkpoints in {self._directory}", self._look)
        self._latest = view["latest"]
        self._checkpoints = list(view["checkpoints"])
        self._times = {p: float(t) for p, t in view["times"].items()}

    def _look(self) -> Dict[str, Any]:
        """The listing: every complete checkpoint up to the newest verified one."""
        found = [p for _, p in numbered_checkpoints(self._directory, self._name) if p not in self._preserved]
        complete, times = [], {}
        for path in found:
            try:
                manifest = storage.read_manifest(path)
            except (storage.CorruptCheckpointError, ValueError, OSError):
                continue  # first_valid below warns about the newest ones
            complete.append(path)
            created = manifest.get("created", 0.0)
            times[path] = float(created) if isinstance(created, (int, float)) else 0.0
        latest = first_valid(list(reversed(found)))
        complete = [p for p in complete if p in found[: found.index(latest) + 1]] if latest is not None else []
        return {"latest": latest, "checkpoints": complete, "times": times}

    def _read_index(self) -> Dict[str, Any]:
        """The ``checkpoint`` index, checked: untrusted, so anything malformed is warned about and ignored."""
        path = storage.join(self._directory, INDEX_FILE)
        if not storage.exists(path):
            return {}
        try:
            import fsspec

            with fsspec.open(path, "rb") as f:
                data = f.read(_MAX_INDEX_BYTES + 1)
            if len(data) > _MAX_INDEX_BYTES:
                raise ValueError(f"larger than {_MAX_INDEX_BYTES} bytes")
            index = json.loads(data)
            return _checked_index(index)
        except (ValueError, TypeError, RecursionError, OSError) as exc:
            warnings.warn(f"{path}: unreadable checkpoint index ({type(exc).__name__}: {str(exc)[:200]}); "
                          "using the directory listing", CheckpointWarning, stacklevel=3)
            return {}

    def _write_index(self) -> None:
        def names(paths: List[str]) -> List[str]:
            return [p.rstrip("/").rsplit("/", 1)[-1].rsplit("\\", 1)[-1] for p in paths]

        index = {"latest": names([self._latest])[0] if self._latest else None,
                 "checkpoints": names(self._checkpoints), "preserved": names(self._preserved),
                 "last_preserved_time": self._last_preserved,
                 "note": "written by distrib; the directory listing is authoritative"}
        storage.atomic_write_bytes(storage.join(self._directory, INDEX_FILE), json.dumps(index, indent=1).encode())

    # -------------------------------------------------------- properties
    @property
    def directory(self) -> str:
        return self._directory

    @property
    def checkpoint(self) -> Checkpoint:
        return self._checkpoint

    @property
    def latest_checkpoint(self) -> Optional[str]:
        """The newest complete checkpoint of this manager, or None. Same on every worker after `save`."""
        return self._latest

    @property
    def checkpoints(self) -> List[str]:
        """Managed checkpoints still on disk, oldest first (preserved ones are not listed)."""
        return list(self._checkpoints)

    @property
    def checkpoint_interval(self) -> Optional[int]:
        return self._interval

    # -------------------------------------------------------------- save
    def save(self, checkpoint_number: Optional[int] = None, check_interval: bool = True,
             options: Optional[CheckpointOptions] = None) -> Optional[str]:
        """Save a numbered checkpoint and delete the ones beyond ``max_to_keep``.

        Collective under a multi-worker strategy: every worker calls it.

        With ``options=CheckpointOptions(enable_async=True)`` the save returns
        once the state is copied; the copy is written in the background, and
        the next `save`, `sync` or `restore_or_initialize` waits for it, checks
        every worker's write succeeded, then records it as the latest and
        deletes the checkpoints beyond ``max_to_keep`` -- never before the new
        one is published, so a crash mid-write leaves the previous one.

        Args:
            checkpoint_number: the ``N`` of ``<name>-N``; default the checkpoint's
                incremented ``save_counter``.
            check_interval: honour ``checkpoint_interval`` (False forces a save).
            options: a `CheckpointOptions`.

        Returns:
            The path saved (or being saved) by the chief, the same on every worker, or None when
            ``checkpoint_interval`` skipped the save.
        """
        background = CheckpointOptions.check(options, "CheckpointManager.save").background
        if self._interval is not None:
            step = _value(self._step_counter)
            if self._last_step is not None and (step == self._last_step or
                                                (check_interval and step < self._last_step + self._interval)):
                return None
            self._last_step = step
        role = resolve_role(self._strategy, "CheckpointManager.save")
        self.sync(role=role)  # at most one save in flight
        if role.is_chief:
            best_effort(lambda: storage.remove_stale_temporaries(self._directory, self._name),
                        f"sweeping stale temporaries in {self._directory}")
        self._checkpoint.save_counter.assign_add(1)
        number = int(self._checkpoint.save_counter) if checkpoint_number is None else int(checkpoint_number)
        path = self._checkpoint.write(storage.join(self._directory, f"{self._name}-{number}"),  # the chief's
                                      options=CheckpointOptions(enable_async=background), role=role)
        if background:
            self._pending = path
        else:
            self._published(role, path)
        if self.snapshot_on_save:
            self.keep_snapshot(role=role)
        return path

    def sync(self, *, role: Optional[CheckpointRole] = None) -> None:
        """Wait for a background save, check it succeeded on every worker, and record it as the latest.

        Collective under a multi-worker strategy (every worker calls it where
        it calls `save`); nothing to do when no save is in flight. ``role``:
        the one the caller resolved (`save`); None: looked up here if a save is in flight.

        Raises:
            CheckpointSaveError: on every worker, if the write failed on any worker.
        """
        if role is None and self._pending is not None:  # nothing of the manager's in flight: no role needed
            role = resolve_role(self._strategy, "CheckpointManager.sync")
        path, self._pending = self._pending, None
        self._checkpoint.sync()
        if path is not None:
            self._published(role, path)

    def _published(self, role: CheckpointRole, path: str) -> None:
        """Record ``path`` as the latest, delete beyond ``max_to_keep``; every worker gets the chief's list."""
        if role.is_chief:  # storage errors here are warnings (best_effort): the listing is the truth
            self._record(path)
            best_effort(self._write_index, f"writing {self._directory}'s index")  # the new latest first
            best_effort(self._sweep, f"deleting old checkpoints in {self._directory}")
            best_effort(self._write_index, f"writing {self._directory}'s index")
        if role.multi_replica:
            shared = role.collective.broadcast_json({"latest": self._latest, "checkpoints": self._checkpoints})
            self._latest, self._checkpoints = shared["latest"], list(shared["checkpoints"])

    def snapshot_with(self, checkpoint: Checkpoint) -> None:
        """Let elastic snapshots hold ``checkpoint`` instead of the saved one (`BackupAndRestore` does)."""
        self._snapshot_checkpoint = checkpoint

    def keep_snapshot(self, *, role: Optional[CheckpointRole] = None) -> None:
        """Under elastic training, keep the checkpoint's state in memory for a replacement (collective).

        A no-op otherwise. `save` calls it unless ``snapshot_on_save`` is False
        (`BackupAndRestore` keeps its own per-step snapshots). ``role``: as for `sync`.
        """
        role = role if role is not None else resolve_role(self._strategy, "CheckpointManager.keep_snapshot")
        elastic = elastic_abilities(role.collective)
        if elastic is not None:
            elastic.keep_snapshot(  # the state is serialised if ever sent
                lambda: freeze_state(self._snapshot_checkpoint.state_dict(role=role)))
            self.snapshot_kept = True

    def _record(self, path: str) -> None:
        if path in self._checkpoints:
            self._checkpoints.remove(path)  # an overwritten checkpoint moves to the end of the queue
        self._checkpoints.append(path)
        self._times[path] = time.time()
        self._latest = path

    def _sweep(self) -> None:
        if self._max_to_keep is None:
            return
        while len(self._checkpoints) > self._max_to_keep:
            oldest = self._checkpoints.pop(0)
            created = self._times.get(oldest, 0.0)
            if self._keep_hours is not None and created - self._last_preserved >= self._keep_hours * 3600.0:
                self._preserved.append(oldest)
                self._last_preserved = created
                continue
            storage.remove_checkpoint(oldest)

    # ----------------------------------------------------------- restore
    def restore_or_initialize(self) -> Optional[str]:
        """Restore the latest checkpoint and return the path restored, else call ``init_fn`` and return None.

        Collective under a multi-worker strategy: every worker restores the
        checkpoint the chief found. If that one does not restore (its values do
        not fit the objects), `Checkpoint.restore` warns and restores the newest
        older one that does: that is the path returned, and the one
        `latest_checkpoint` names from then on.
        """
        role = resolve_role(self._strategy, "CheckpointManager.restore_or_initialize")
        self.sync(role=role)
        path = self._latest
        if role.multi_replica:
            path = role.collective.broadcast_json(path)
        elastic = elastic_abilities(role.collective)
        snapshot = elastic.take_snapshot() if elastic is not None else None
        if elastic is not None and snapshot is not None:  # a replacement: the survivors' state, not the stored one
            self._snapshot_checkpoint.load_state_dict(loads_state(snapshot, name="a survivor's in-memory snapshot"),
                                                      role=role)
            elastic.snapshot_restored()
            path = PEER_SNAPSHOT
        elif path is not None:
            path = self._restored(role, self._checkpoint.restore(path, role=role).path)
        elif self._init_fn is not None:
            self._init_fn()
        if self.snapshot_on_save:
            self.keep_snapshot(role=role)  # elastic: a replacement can start from here
        return path

    def _restored(self, role: CheckpointRole, path: Optional[str]) -> Optional[str]:
        """Make ``path`` (what `Checkpoint.restore` fell back to, if it did) the latest; the same everywhere."""
        if role.multi_replica:
            paths = role.collective.all_gather_json(path)
            if len(set(paths)) != 1:
                raise AgreementError(f"CheckpointManager.restore_or_initialize: the workers restored different "
                                     f"checkpoints ({', '.join(f'replica {i}: {p}' for i, p in enumerate(paths))})")
        if path is not None and path != self._latest:
            newer = [p for p in self._checkpoints if p != path and _number(p) > _number(path)]
            self._checkpoints = [p for p in self._checkpoints if p not in newer]
            self._latest = path
        return path

    def __repr__(self) -> str:
        return (f"CheckpointManager(directory={self._directory!r}, latest={self._latest!r}, "
                f"max_to_keep={self._max_to_keep})")

