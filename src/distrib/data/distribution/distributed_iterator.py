"""`DistributedIterator`: one replica's batches, the end-of-data agreement, and positions.

An iterator reads a `DistributedSource` (the task's pipeline, its `Sharding`,
the shared `IterContext` and the `InputHost`); it knows nothing of the
`DistributedDataset` that made it.

How the pass ends (`Ending`), decided identically on every worker when the
iterator is made:

- ``NATURAL``: the stream is the same on every worker (DATA, OFF) and its
  length is known, or there is one worker: stop where it ends; no collective.
- ``FIXED``: per-worker inputs whose lengths are all known: at ``iter()`` one
  ``all_gather_json`` agrees on the longest; workers that run out earlier
  receive empty batches until then.
- ``PER_STEP``: some length is unknown: every step one ``agree_any`` says
  whether any worker still has data; exhausted workers receive empty batches.

Where this replica is (`Phase`): ``READING`` its data, ``PADDING`` (its data
ran out, other workers' did not: empty batches) or ``FINISHED`` (the pass
ended on every worker).

Empty batches have zero rows and the element spec's dtypes and inner shapes
(taken from another worker if this one never saw an element), so every step
still involves every replica and losses divided by the global batch size
weigh the last partial batch correctly.

Example (per-worker lengths 5 and 2 batches, so ``FIXED`` at 5): both workers
step 5 times; the second is ``PADDING`` for the last 3 (empty batches), then
both are ``FINISHED``.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import torch

from distrib.data.distribution import batch_position
from distrib.data.batch_split import global_batch_size
from distrib.data.blocks import materialize
from distrib.data.distribution.device_stager import DeviceStager, staged_value
from distrib.data.dataset import Dataset
from distrib.data.distribution.feeds import EMPTY, FEEDS, Feed
from distrib.data.distribution.input_context import InputHost, InputPlacement
from distrib.data.iterator import Optional as DataOptional
from distrib.data.iterator import OutOfRangeError
from distrib.data.distribution.input_options import InputOptions
from distrib.data.distribution.lookahead import Lookahead
from distrib.data.options import INFINITE, UNKNOWN
from distrib.data.distribution.sharding import Sharding, resharding_limit
from distrib.errors import DistribError
from distrib.data.stream import IterContext
from distrib.data.structure import (empty_from_spec, loosen_batch, spec_from_json, spec_of,
                                    spec_to_json)

__all__ = ["DistributedIterator", "DistributedSource", "Ending", "InputReshardError", "Phase", "STATE_VERSION", "check_version"]

_log = logging.getLogger("distrib.data")

#: Version of the states of distributed datasets and their iterators.
STATE_VERSION = 1


def check_version(state: Any) -> None:
    """An error unless ``state`` is a distributed-dataset or -iterator state of this version."""
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise ValueError(f"not a distrib.data distributed-iterator state (version {STATE_VERSION}): "
                         f"{str(state)[:80]}")


class InputReshardError(DistribError, ValueError):
    """The job changed size but the input cannot be divided anew (per-worker data; see `resharding_limit`)."""


class Ending(enum.Enum):
    """How the pass ends (see the module docstring); the values are what states record."""

    NATURAL = "natural"
    FIXED = "fixed"
    PER_STEP = "per_step"


class Phase(enum.Enum):
    """Where this replica is in the pass."""

    READING = "reading"
    PADDING = "padding"
    FINISHED = "finished"


@dataclass(frozen=True)
class DistributedSource:
    """What a `DistributedIterator` reads.

    Args:
        host: placement, device and collective (a strategy or an `InputBinding`).
        dataset: the pipeline this worker task reads.
        sharding: how it is divided among the replicas.
        ctx: pass count, seeds and caches shared by the iterators of one distributed dataset.
    """

    host: InputHost
    dataset: Dataset
    sharding: Sharding
    ctx: IterContext = field(compare=False)
    options: InputOptions = field(default_factory=InputOptions, compare=False)

    @property
    def element_spec(self) -> Any:
        """The spec of one replica's batch."""
        spec = self.dataset.element_spec
        return spec if self.sharding is Sharding.LOCAL else loosen_batch(spec)


class DistributedIterator:
    """Per-replica batches of a `DistributedSource`, on the host's device."""

    def __init__(self, source: DistributedSource) -> None:
        self._source = source
        host = source.host
        self._collective = host.collective
        device = torch.device(host.device) if host.device is not None else None
        self._device = device if device is not None and device.type != "cpu" else None
        self._stager = DeviceStager(self._device if source.options.fetches_to_device() else None)
        self._depth = source.options.buffer_size(self._device)
        self._placement = host.input_placement()
        self._n, self._r = self._placement.num_replicas_in_sync, self._placement.replica_id
        self._ahead = self._lookahead(self._make_feed(None))
        self._global_size: Optional[int] = None  # of the last element handed out, where known
        self._spec: Any = None
        self._step = 0
        self._total = UNKNOWN
        self._phase = Phase.READING
        self._ending = self._choose_ending()

    def _make_feed(self, state: Optional[dict]) -> Feed:
        s = self._source
        return FEEDS[s.sharding](s.dataset, s.ctx, self._placement, state)

    def _lookahead(self, feed: Feed) -> Lookahead:
        return Lookahead(feed, self._depth, lambda element: self._stager.start(materialize(element)), EMPTY)

    def _multi_replica(self) -> bool:
        """Several replicas, or an elastic job (one worker takes the multi-replica path: it may grow)."""
        return self._n > 1 or self._collective.elastic

    def _choose_ending(self) -> Ending:
        if not self._multi_replica():
            return Ending.NATURAL
        if not self._source.sharding.per_worker:
            return Ending.PER_STEP if self._source.dataset.cardinality() == UNKNOWN else Ending.NATURAL
        first = self._ahead.peek().element
        if first is not None and first is not EMPTY:
            self._spec = loosen_batch(spec_of(staged_value(first)))
        mine = {"steps": self._ahead.feed.steps(), "spec": None if self._spec is None else spec_to_json(self._spec)}
        everyone = self._collective.all_gather_json(mine)
        specs = [e["spec"] for e in everyone if e["spec"] is not None]
        if specs and self._spec is None:  # this worker has no data: pad like the others
            self._spec = spec_from_json(specs[0])
        steps = [e["steps"] for e in everyone]
        if UNKNOWN in steps:
            return Ending.PER_STEP
        self._total = INFINITE if INFINITE in steps else max(steps)
        return Ending.FIXED

    # ------------------------------------------------------------- iteration

    def _finish(self) -> None:
        self._phase = Phase.FINISHED
        return None

    def _next(self) -> Any:
        if self._phase is Phase.FINISHED:
            return None
        self._collective.apply_pending_resize()  # elastic: workers agreed to leave after the last step
        placement = self._source.host.input_placement()
        if placement != self._placement:
            self._reshard(placement)
        ending = self._ending
        if ending is Ending.FIXED and self._total != INFINITE and self._step >= self._total:
            return self._finish()
        read = self._ahead.next() if self._phase is Phase.READING else None
        element = None if read is None else read.element
        if element is None:
            self._phase = Phase.PADDING
            if ending is Ending.NATURAL:
                return self._finish()
        if ending is Ending.PER_STEP and not self._collective.agree_any(element is not None):
            return self._finish()
        self._step += 1
        if element is None or element is EMPTY:
            value = self._padding()
            if self._spec is None:
                self._spec = loosen_batch(spec_of(value))
            return value if self._device is None else self._stager.finish(self._stager.start(value))
        value = self._stager.finish(element)
        if self._spec is None:
            self._spec = loosen_batch(spec_of(value))
        self._global_size = read.global_size  # type: ignore[union-attr]
        first_row = read.first_row  # type: ignore[union-attr]
        if first_row is not None and self._multi_replica():
            batch_position.note(value, first_row)  # where this replica's rows sit in the global batch
        return value

    def _reshard(self, placement: InputPlacement) -> None:
        """The job changed size (elastic): the same global batches, split among the new replicas."""
        why = resharding_limit(self._source.sharding)
        if why is not None:
            raise InputReshardError(f"the job changed from {self._n} to {placement.num_replicas_in_sync} "
                                    f"replicas but this input cannot be resharded: {why}")
        self._ahead.rewind(self._make_feed)  # what was read ahead was split for the old placement
        self._placement = placement
        self._n, self._r = placement.num_replicas_in_sync, placement.replica_id
        self._ahead.feed.reshard(placement)

    def _padding(self) -> Any:
        if self._spec is None:
            self._spec = self._source.element_spec
        return empty_from_spec(self._spec)

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

    def next_with_global_size(self) -> Tuple[Any, int]:
        """``(this replica's next batch, rows in its global batch)``; StopIteration at the end.

        The size is planned, with no communication, where every worker reads
        the same global stream of known length (`Ending.NATURAL`); otherwise
        the replicas' rows are summed, a collective every replica makes.
        """
        batch = next(self)
        planned = self._global_size if self._ending is Ending.NATURAL else None
        return batch, global_batch_size(batch, planned, self._collective, self._n, self._multi_replica())

    @property
    def element_spec(self) -> Any:
        return self._source.element_spec

    @property
    def ending(self) -> Ending:
        """How this pass ends (agreed by every worker)."""
        return self._ending

    @property
    def phase(self) -> Phase:
        """Where this replica is in the pass."""
        return self._phase

    @property
    def finished(self) -> bool:
        """True once the pass has ended on every worker."""
        return self._phase is Phase.FINISHED

    # ----------------------------------------------------------- checkpoints
    def state_dict(self, gather: bool = True) -> Dict[str, Any]:
        """The position as a JSON-able dict.

        For per-worker inputs (FILE, dataset functions) every worker's position
        is collected, so this is a collective call that every worker must make
        (``gather=False`` returns this worker's part only).
        """
        feed_state = self._ahead.state()
        local = {"feed": feed_state, "local_done": self._phase is not Phase.READING}
        workers = [local]
        if self._source.sharding.per_worker and self._multi_replica() and gather:
            workers = self._collective.all_gather_json(local)
        return {"version": STATE_VERSION, "mode": self._source.sharding.value, "num_replicas": self._n,
                "replica_id": self._r, "ending": self._ending.value, "step": self._step,
                "total": self._total, "finished": self._phase is Phase.FINISHED, "workers": workers}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a saved position (see `distrib.data.distribution.distributed` for other worker counts)."""
        check_version(state)
        sharding = self._source.sharding
        if state["mode"] != sharding.value:
            raise ValueError(f"iterator state was saved in {state['mode']!r} mode but this dataset is "
                             f"distributed in {sharding.value!r} mode: restore it into the same kind of dataset")
        saved_n = int(state["num_replicas"])
        if sharding.per_worker:
            if saved_n != self._n or len(state["workers"]) != self._n:
                _log.warning("input position saved with %d workers cannot be restored onto %d: "
                             "%s input is per worker; starting this pass from its beginning", saved_n, self._n,
                             "FILE-sharded" if sharding is Sharding.FILE else "dataset-function")
                return
            mine = state["workers"][self._r]
        else:
            mine = state["workers"][0]
            if saved_n != self._n:
                _log.info("input position saved with %d replicas restored onto %d: the global "
                          "sequence of examples continues unchanged, each batch now split %d ways",
                          saved_n, self._n, self._n)
        self._ahead = self._lookahead(self._make_feed(mine["feed"]))
        self._step, self._total = int(state["step"]), int(state["total"])
        self._phase = (Phase.FINISHED if state["finished"] else
                       Phase.PADDING if mine["local_done"] else Phase.READING)
        if self._multi_replica() and saved_n == self._n:
            self._ending = Ending(state["ending"])
        elif not self._multi_replica():
            self._ending = Ending.NATURAL
