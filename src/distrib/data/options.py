"""`Options` for a dataset, with tf.data's distribute options and constants.

Example (TensorFlow's multi-worker Keras tutorial, ported line for line):
    >>> options = Options()
    >>> options.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    >>> options.distribute.auto_shard_policy
    <AutoShardPolicy.OFF: -1>
"""
from __future__ import annotations

import enum
from typing import Any, Optional

__all__ = ["AutoShardPolicy", "DistributeOptions", "ThreadingOptions", "Options", "AUTOTUNE", "INFINITE", "UNKNOWN",
           "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY"]

INFINITE = -1
"""``cardinality()`` of a dataset that never ends (``tf.data.INFINITE_CARDINALITY``)."""
INFINITE_CARDINALITY = INFINITE
"""The same as `INFINITE`, under tf.data's longer name."""
UNKNOWN = -2
"""``cardinality()`` of a dataset whose length is only known by reading it."""
UNKNOWN_CARDINALITY = UNKNOWN
"""The same as `UNKNOWN`, under tf.data's longer name."""
AUTOTUNE = -1
"""Accepted wherever tf.data takes ``tf.data.AUTOTUNE`` (``prefetch``, ``num_parallel_calls``)."""


class AutoShardPolicy(enum.IntEnum):
    """How a distributed dataset divides its input among workers.

    - ``AUTO``: FILE when the source is `Dataset.from_files` with at least one
      file per worker, DATA otherwise (the choice is logged once at DEBUG).
    - ``FILE``: each worker reads its own files (``files[i::num_workers]``);
      an error when there are fewer files than workers.
    - ``DATA``: every worker plans the whole (global) stream and keeps only its
      replica's slice of each global batch; shares are disjoint.
    - ``OFF``: no sharding; every worker sees every example.
    """

    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2


class _Strict:
    """Attribute-checked option holder: a typo is an error, not a silently ignored setting."""

    _fields: tuple = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._fields and not name.startswith("_"):
            raise AttributeError(f"{type(self).__name__} has no option {name!r}; "
                                 f"known options: {', '.join(self._fields)}")
        object.__setattr__(self, name, value)


class DistributeOptions(_Strict):
    """``Options().distribute``: the auto-shard policy (``num_devices`` is accepted, unused)."""

    _fields = ("auto_shard_policy", "num_devices")

    def __init__(self) -> None:
        self.auto_shard_policy: AutoShardPolicy = AutoShardPolicy.AUTO
        self.num_devices: Optional[int] = None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "auto_shard_policy":
            value = _as_policy(value)
        super().__setattr__(name, value)

    def __repr__(self) -> str:
        return f"DistributeOptions(auto_shard_policy={self.auto_shard_policy!r})"


class ThreadingOptions(_Strict):
    """``Options().threading``: who runs the parallel operators' work (docs/input-pipelines.md).

    Attributes:
        workers: ``"threads"`` (default: torch ops and image decoding release the
            GIL) or ``"processes"`` (forked worker processes, for map functions
            that hold the GIL: pure-Python parsing); applies to ``map(...,
            num_parallel_calls=)``.
        private_threadpool_size: when > 0, caps every ``num_parallel_calls``
            (tf.data's meaning: the pipeline's own pool size).
        max_intra_op_parallelism: torch threads per worker (default 1, as a
            DataLoader worker; 0 leaves torch's setting alone).
    """

    _fields = ("workers", "private_threadpool_size", "max_intra_op_parallelism")

    def __init__(self) -> None:
        self.workers: str = "threads"
        self.private_threadpool_size: int = 0
        self.max_intra_op_parallelism: int = 1

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "workers" and value not in ("threads", "processes"):
            raise ValueError(f"Options().threading.workers must be 'threads' or 'processes', got {value!r}")
        super().__setattr__(name, value)

    def __repr__(self) -> str:
        return f"ThreadingOptions(workers={self.workers!r}, private_threadpool_size={self.private_threadpool_size})"


class Options(_Strict):
    """Options of a dataset, attached with `Dataset.with_options`.

    ``experimental_distribute`` is ``distribute`` (the TF tutorials' spelling),
    ``experimental_deterministic`` is ``deterministic`` (the default of
    ``map``/``interleave``'s ``deterministic=None``: True unless set) and
    ``experimental_threading`` is ``threading``. Options set later in a
    pipeline win over earlier ones; unset options do not override.
    """

    _fields = ("distribute", "experimental_distribute", "deterministic",
               "experimental_deterministic", "threading", "experimental_threading", "_set")

    def __init__(self) -> None:
        object.__setattr__(self, "_set", set())
        object.__setattr__(self, "distribute", _TrackedDistribute(self))
        object.__setattr__(self, "threading", _TrackedThreading(self))
        object.__setattr__(self, "deterministic", None)

    @property  # type: ignore[override]
    def experimental_threading(self) -> ThreadingOptions:
        return self.threading

    @property  # type: ignore[override]
    def experimental_distribute(self) -> DistributeOptions:
        return self.distribute

    @property
    def experimental_deterministic(self) -> Optional[bool]:
        return self.deterministic

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "experimental_distribute":
            name = "distribute"
        if name == "experimental_deterministic":
            name = "deterministic"
        if name in ("threading", "experimental_threading"):
            if not isinstance(value, ThreadingOptions):
                raise TypeError(f"Options().threading must be a ThreadingOptions, got {type(value).__name__}")
            for field in ThreadingOptions._fields:
                setattr(self.threading, field, getattr(value, field))
            return
        if name == "distribute" and isinstance(value, DistributeOptions):
            self._set.add("auto_shard_policy")
            object.__setattr__(self.distribute, "auto_shard_policy", value.auto_shard_policy)
            return
        super().__setattr__(name, value)
        self._set.add(name)

    def merge(self, later: "Options") -> "Options":
        """These options overridden by every option ``later`` has set."""
        out = Options()
        for src in (self, later):
            for name in src._set:
                if name == "auto_shard_policy":
                    out.distribute.auto_shard_policy = src.distribute.auto_shard_policy
                elif name == "num_devices":
                    out.distribute.num_devices = src.distribute.num_devices
                elif name.startswith("threading."):
                    field = name.partition(".")[2]
                    setattr(out.threading, field, getattr(src.threading, field))
                else:
                    setattr(out, name, getattr(src, name))
        return out

    def __repr__(self) -> str:
        return f"Options(distribute={self.distribute!r}, deterministic={self.deterministic})"


class _TrackedDistribute(DistributeOptions):
    """Remembers which distribute options were set, so `Options.merge` only applies those."""

    def __init__(self, owner: Options) -> None:
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "auto_shard_policy", AutoShardPolicy.AUTO)
        object.__setattr__(self, "num_devices", None)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        self._owner._set.add(name)


class _TrackedThreading(ThreadingOptions):
    """Remembers which threading options were set (as ``"threading.<name>"``) for `Options.merge`."""

    def __init__(self, owner: Options) -> None:
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "workers", "threads")
        object.__setattr__(self, "private_threadpool_size", 0)
        object.__setattr__(self, "max_intra_op_parallelism", 1)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        self._owner._set.add(f"threading.{name}")


def _as_policy(value: Any) -> AutoShardPolicy:
    if isinstance(value, AutoShardPolicy):
        return value
    if isinstance(value, str) and value.upper() in AutoShardPolicy.__members__:
        return AutoShardPolicy[value.upper()]
    try:
        return AutoShardPolicy(int(value))
    except (TypeError, ValueError):
        raise ValueError(f"auto_shard_policy must be an AutoShardPolicy (AUTO, FILE, DATA or OFF), "
                         f"got {value!r}") from None
