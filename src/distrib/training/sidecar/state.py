"""The side-car evaluator's memory: which checkpoints it has already evaluated.

One small JSON file, ``<eval dir>/sidecar_state.json``, replaced atomically
after every evaluation::

    {"format": "distrib-sidecar-state", "version": 1,
     "evaluated": [{"checkpoint": "ckpt-1", "number": 1, "metrics": {"loss": 0.71}}, ...]}

A restarted evaluator reads it and skips what it lists, so no checkpoint's
evaluation is recorded twice. The file is untrusted input: anything that is
not exactly this shape is refused with one line naming the file and the fix.

Example:
    >>> state = SidecarState.load("/logs/eval/sidecar_state.json")   # empty if missing
    >>> state.add("ckpt-3", 3, {"loss": 0.5})
    >>> state.save()
    >>> SidecarState.load("/logs/eval/sidecar_state.json").names()
    {'ckpt-3'}
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Set

from distrib.checkpoint.files.fs import atomic_write_bytes, url_to_fs
from distrib.errors import DistribError

__all__ = ["SidecarStateError", "SidecarState", "STATE_FILE"]

STATE_FILE = "sidecar_state.json"
_FORMAT = "distrib-sidecar-state"
_VERSION = 1
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,200}-\d{1,18}$")
_MAX_BYTES = 16 * 1024 * 1024


class SidecarStateError(DistribError, ValueError):
    """The evaluator's state file is unreadable or not the expected shape."""


@dataclass
class SidecarState:
    """Evaluated checkpoints, in the order they were evaluated."""

    path: str
    evaluated: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, path: str) -> "SidecarState":
        """Read ``path`` (an empty state if it does not exist).

        Raises:
            SidecarStateError: the file is not valid JSON of the expected shape.
        """
        fs, p = url_to_fs(path)
        try:
            with fs.open(p, "rb") as handle:
                raw = handle.read(_MAX_BYTES + 1)
        except FileNotFoundError:
            return cls(path)
        fix = "delete it to evaluate every checkpoint again"
        if len(raw) > _MAX_BYTES:
            raise SidecarStateError(f"{path}: evaluator state file is larger than {_MAX_BYTES} bytes; {fix}")
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise SidecarStateError(f"{path}: evaluator state file is not valid JSON ({exc}); {fix}") from None
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT or doc.get("version") != _VERSION:
            raise SidecarStateError(f"{path}: not a distrib side-car evaluator state file "
                                    f"(format {_FORMAT!r} version {_VERSION} expected); {fix}")
        entries = doc.get("evaluated")
        if not isinstance(entries, list):
            raise SidecarStateError(f"{path}: field 'evaluated' must be a list; {fix}")
        seen: Set[str] = set()
        for i, entry in enumerate(entries):
            _check_entry(path, i, entry, seen, fix)
        return cls(path, [dict(e) for e in entries])

    def names(self) -> Set[str]:
        """Names (``ckpt-N``) of the checkpoints already evaluated."""
        return {e["checkpoint"] for e in self.evaluated}

    def add(self, name: str, number: int, metrics: Dict[str, float]) -> None:
        """Record one evaluation (call `save` to make it durable)."""
        self.evaluated.append({"checkpoint": name, "number": int(number),
                               "metrics": {str(k): float(v) for k, v in metrics.items()}})

    def save(self) -> None:
        """Replace the file atomically."""
        doc = {"format": _FORMAT, "version": _VERSION, "evaluated": self.evaluated}
        atomic_write_bytes(self.path, json.dumps(doc, indent=1, allow_nan=True).encode("utf-8"))


def _check_entry(path: str, i: int, entry: Any, seen: Set[str], fix: str) -> None:
    where = f"{path}: evaluated[{i}]"
    if not isinstance(entry, dict) or set(entry) != {"checkpoint", "number", "metrics"}:
        raise SidecarStateError(f"{where} must be an object with checkpoint, number and metrics; {fix}")
    name, number, metrics = entry["checkpoint"], entry["number"], entry["metrics"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise SidecarStateError(f"{where}.checkpoint must be a checkpoint name like 'ckpt-3', got {name!r}; {fix}")
    if isinstance(number, bool) or not isinstance(number, int) or number < 0:
        raise SidecarStateError(f"{where}.number must be an integer >= 0, got {number!r}; {fix}")
    if name in seen:
        raise SidecarStateError(f"{where}: {name} is listed twice; {fix}")
    seen.add(name)
    if not isinstance(metrics, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
            for k, v in metrics.items()):
        raise SidecarStateError(f"{where}.metrics must map names to numbers; {fix}")
