"""`DistributedIterator`: one replica's batches, the end-of-data agreement, and positions.

How the epoch ends, decided identically on every worker:

- ``natural``: the stream is the same on every worker (DATA, OFF) and its
  length is known, or there is one worker: stop where it ends; no collective.
- ``fixed``: per-worker inputs whose lengths are all known: at ``iter()`` one
  ``all_gather_json`` agrees on the longest; workers that run out earlier
  receive empty batches until then.
- ``per_step``: some length is unknown: every step one ``agree_any`` says
  whether any worker still has data; exhausted workers receive empty batches.

Empty batches have zero rows and the element spec's dtypes and inner shapes
(taken from another worker if this one never saw an element), so every step
still involves every replica and losses divided by the global batch size
weigh the last partial batch correctly.

Example (per-worker lengths 5 and 2 batches): both workers step 5 times; the
second receives 3 empty batches at the end.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, Optional

import torch

from distrib.data.blocks import materialize
from distrib.data.feeds import EMPTY, Feed, LocalFeed, PieceFeed, SliceFeed
from distrib.data.iterator import Optional as DataOptional
from distrib.data.iterator import OutOfRangeError
from distrib.data.options import INFINITE, UNKNOWN
from distrib.data.structure import (empty_from_spec, loosen_batch, map_leaves, spec_from_json,
                                    spec_of, spec_to_json)

if TYPE_CHECKING:  # pragma: no cover
    from distrib.data.distributed import DistributedDataset
    from distrib.data.input_context import InputHost

__all__ = ["DistributedIterator"]

_log = logging.getLogger("distrib.data")
_VERSION = 1
_NONE = object()
_FEEDS = {"data": SliceFeed, "off": PieceFeed, "file": PieceFeed, "local": LocalFeed}


class DistributedIterator:
    """Per-replica batches of a `DistributedDataset`, on the strategy's device."""

    def __init__(self, owner: "DistributedDataset") -> None:
        self._owner = owner
        strategy = owner._strategy
        self._collective = strategy.collective
        device = torch.device(strategy.device) if strategy.device is not None else None
        self._device = device if device is not None and device.type != "cpu" else None
        self._placement = strategy.input_placement()
        self._n, self._r = self._placement.num_replicas_in_sync, self._placement.replica_id
        self._feed = self._make_feed(None)
        self._pending: Any = _NONE
        self._pending_state: Optional[dict] = None
        self._spec: Any = None
        self._step = 0
        self._total = UNKNOWN
        self._local_done = False
        self._finished = False
        self._ending = self._choose_ending()

    def _make_feed(self, state: Optional[dict]) -> Feed:
        o = self._owner
        return _FEEDS[o._mode](o._dataset, o._ctx, self._placement, state)

    def _choose_ending(self) -> str:
        """'natural' (stop at the end of the stream), 'fixed' (agreed step count) or 'per_step'."""
        if self._n == 1:
            return "natural"
        if not self._owner.per_worker:
            n = self._owner._dataset.cardinality()
            return "per_step" if n == UNKNOWN else "natural"
        self._pending_state = self._feed.state()
        self._pending = self._feed.next()
        if self._pending is not None and self._pending is not EMPTY:
            self._pending = materialize(self._pending)
            self._spec = loosen_batch(spec_of(self._pending))
        mine = {"steps": self._feed.steps(),
                "spec": None if self._spec is None else spec_to_json(self._spec)}
        everyone = self._collective.all_gather_json(mine)
        specs = [e["spec"] for e in everyone if e["spec"] is not None]
        if specs and self._spec is None:  # this worker has no data: pad like the others
            self._spec = spec_from_json(specs[0])
        steps = [e["steps"] for e in everyone]
        if UNKNOWN in steps:
            return "per_step"
        self._total = INFINITE if INFINITE in steps else max(steps)
        return "fixed"

    # ------------------------------------------------------------- iteration
    def _next_local(self) -> Any:
        if self._pending is not _NONE:
            element, self._pending, self._pending_state = self._pending, _NONE, None
            return element
        return self._feed.next()

    def _padding(self) -> Any:
        if self._spec is None:
            self._spec = self._owner.element_spec
        return empty_from_spec(self._spec)

    def _next(self) -> Any:
        if self._finished:
            return None
        ending = self._ending
        if ending == "fixed" and self._total != INFINITE and self._step >= self._total:
            self._finished = True
            return None
        element = None if self._local_done else self._next_local()
        if element is None:
            self._local_done = True
            if ending == "natural":
                self._finished = True
                return None
        if ending == "per_step" and not self._collective.agree_any(element is not None):
            self._finished = True
            return None
        self._step += 1
        value = self._padding() if element is None or element is EMPTY else materialize(element)
        if self._spec is None:
            self._spec = loosen_batch(spec_of(value))
        if self._device is not None:
            value = map_leaves(lambda t: t.to(self._device, non_blocking=True)
                               if isinstance(t, torch.Tensor) else t, value)
        return value

    def __iter__(self) -> "DistributedIterator":
        return self

    def __next__(self) -> Any:
        value = self._next()
        if value is None:
            raise StopIteration
        return value

    def get_next(self) -> Any:
        """This replica's next batch; `OutOfRangeError` once every worker has run out."""
        value = self._next()
        if value is None:
            raise OutOfRangeError("end of the distributed dataset")
        return value

    def get_next_as_optional(self) -> DataOptional:
        value = self._next()
        return DataOptional.empty(self.element_spec) if value is None else DataOptional.from_value(value)

    @property
    def element_spec(self) -> Any:
        return self._owner.element_spec

    @property
    def global_batch_size(self) -> Optional[int]:
        """Examples in the global batch the last batch came from, where known without a collective.

        Known for DATA-sharded input (every worker plans the same global batches);
        None for per-worker input, where only a reduction could tell.
        """
        if self._ending != "natural" or self._pending is not _NONE:
            return None
        return self._feed.global_size

    @property
    def finished(self) -> bool:
        """True once the pass has ended on every worker."""
        return self._finished

    # ----------------------------------------------------------- checkpoints
    def _feed_state(self) -> dict:
        return self._pending_state if self._pending is not _NONE else self._feed.state()

    def state_dict(self, gather: bool = True) -> Dict[str, Any]:
        """The position as a JSON-able dict.

        For per-worker inputs (FILE, dataset functions) every worker's position
        is collected, so this is a collective call that every worker must make
        (``gather=False`` returns this worker's part only).
        """
        local = {"feed": self._feed_state(), "local_done": self._local_done}
        workers = [local]
        if self._owner.per_worker and self._n > 1 and gather:
            workers = self._collective.all_gather_json(local)
        return {"version": _VERSION, "mode": self._owner._mode, "num_replicas": self._n,
                "replica_id": self._r, "ending": self._ending, "step": self._step,
                "total": self._total, "finished": self._finished, "workers": workers}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a saved position (see the module docstring for other worker counts)."""
        from distrib.data.distributed import check_version

        check_version(state)
        mode = self._owner._mode
        if state["mode"] != mode:
            raise ValueError(f"iterator state was saved in {state['mode']!r} mode but this dataset is "
                             f"distributed in {mode!r} mode: restore it into the same kind of dataset")
        saved_n = int(state["num_replicas"])
        if self._owner.per_worker:
            if saved_n != self._n or len(state["workers"]) != self._n:
                _log.warning("input position saved with %d workers cannot be restored onto %d: "
                             "%s input is per worker; starting this pass from its beginning",
                             saved_n, self._n, "FILE-sharded" if mode == "file" else "dataset-function")
                return
            mine = state["workers"][self._r]
        else:
            mine = state["workers"][0]
            if saved_n != self._n:
                _log.info("input position saved with %d replicas restored onto %d: the global "
                          "sequence of examples continues unchanged, each batch now split %d ways",
                          saved_n, self._n, self._n)
        self._feed = self._make_feed(mine["feed"])
        self._pending, self._pending_state = _NONE, None
        self._local_done = bool(mine["local_done"])
        self._step, self._total = int(state["step"]), int(state["total"])
        self._finished = bool(state["finished"])
        if self._n > 1 and saved_n == self._n:
            self._ending = state["ending"]
        elif self._n == 1:
            self._ending = "natural"
