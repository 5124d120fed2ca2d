"""``map(f, num_parallel_calls=N)``: ``f`` on N workers, the serial map's elements, exactly resumable.

Elements are read from the input on the calling thread, numbered (their
*ordinal*, the serial map's element count: it keys their random draws, so
the result does not depend on N) and handed to the pool 8 to a task; up to
``16 N`` are in flight. Results come out in input order, or as they finish with
``deterministic=False``. A lazy batch (a map after ``batch``) is not run on a
worker: the map is deferred onto it as in the serial map, so a replica still
applies it to its own rows.

Position: the input's state before the block holding the first element not
handed out, the number of that block's elements handed out (``skip``) and,
without determinism, the later ones handed out (``done``). Work in flight is
dropped on restore and computed again.

Example:
    >>> ds = Dataset.range(8).map(lambda x: x * x, num_parallel_calls=4)
    >>> [int(v) for v in ds]            # the serial order
    [0, 1, 4, 9, 16, 25, 36, 49]
"""
from __future__ import annotations

import traceback
import weakref
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Callable, Deque, List, Optional, Set, Tuple

import numpy as np
import torch

from distrib.data.blocks import Block, LazyBatch, ListBlock
from distrib.data.dataset import Dataset
from distrib.data.batch_buffers import NUMPY_DTYPES
from distrib.data.parallel.shared_slots import Slot, SlotLender, write_into
from distrib.data.parallel.thread_rows import RowLender, Rows, into_rows
from distrib.data.parallel.workers import WorkerPool, parallel_calls, process_fn, with_element_note
from distrib.data.transforms.random_draws import ElementKey, RowKeyedCall, call_keyed
from distrib.data.stream import BlockIterator, IterContext
from distrib.data.structure import leaves, map_leaves, to_structure
from distrib.data.transforms.elementwise import MapDataset, _MapSeed

__all__ = ["ParallelMapDataset"]

Lineage = Tuple[int, ...]


class ParallelMapDataset(MapDataset):
    """`Dataset.map` with ``num_parallel_calls`` (see the module docstring)."""

    def __init__(self, input_dataset: Dataset, fn: Callable, num_parallel_calls: int,
                 deterministic: Optional[bool] = None) -> None:
        super().__init__(input_dataset, fn)
        parallel_calls(num_parallel_calls)  # an error now for a bad count
        self._calls, self._deterministic = int(num_parallel_calls), deterministic

    def _iterator(self, ctx: IterContext, lineage: Lineage, state: Optional[dict]) -> BlockIterator:
        options = ctx.options()
        deterministic = self._deterministic
        if deterministic is None:
            deterministic = options.deterministic is not False
        size = parallel_calls(self._calls, int(options.threading.private_threadpool_size))
        def reopen(position: Optional[dict]) -> BlockIterator:
            return self._input._iterator(ctx, lineage, position)

        return _ParallelMapIterator(self._fn, reopen, _MapSeed(ctx, self), lineage, state, size,
                                    deterministic, options.threading)


class _FixedSeed:
    """A map seed that crosses a pipe (the `_MapSeed` value, resolved)."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self) -> int:
        return self.value


def _apply_on_thread(fn: Callable, elements: List[Any], keys: List[ElementKey],
                     rows: List[Optional[Rows]]) -> List[Any]:
    """On a worker thread, for each element: ``(True, result, fitted)`` (its large tensors copied into
    the batch rows lent, if any; ``fitted`` False where they did not fit) or ``(False, the error, True)``."""
    out = []
    for element, key, row in zip(elements, keys, rows):
        try:
            result, fitted = into_rows(to_structure(call_keyed(fn, element, key)), row)
            out.append((True, result, fitted))
        except Exception as error:  # noqa: BLE001 - raised in order by the consumer
            out.append((False, error, True))
    return out


#: Elements per task (one hand-off, and for a process one pipe round trip, for several elements).
_CHUNK = 8


class _Packed:
    """A CPU tensor crossing the pipe as a numpy array: by value, with no shared-memory file per tensor
    (what torch's pickling of a tensor costs: an ``shm`` file and a file descriptor each)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __reduce__(self) -> Any:
        return (_Packed, (self.array,))


def _pack(value: Any) -> Any:
    def one(leaf: Any) -> Any:
        if type(leaf) is torch.Tensor and leaf.device.type == "cpu" and leaf.dtype in NUMPY_DTYPES:
            return _Packed(leaf.detach().numpy())
        return leaf
    return map_leaves(one, value)


def _unpack(value: Any) -> Any:
    return map_leaves(lambda leaf: torch.from_numpy(leaf.array) if type(leaf) is _Packed else leaf, value)




def _apply_in_process(elements: List[Any], seed: int, lineage: Lineage, ordinals: List[int],
                      slots: List[Optional[Slot]]) -> List[Any]:
    """In a worker process, for each element: ``(True, result written into its slot, True)``,
    ``(True, packed result, False)`` where it did not fit, or ``(False, the error, False)``."""
    fn, out = process_fn(), []
    for element, ordinal, slot in zip(elements, ordinals, slots):
        try:
            key = ElementKey(_FixedSeed(seed), lineage, ordinal)
            result = to_structure(call_keyed(fn, _unpack(element), key))
            written = write_into(slot, result)
            out.append((True, _pack(written), True) if written is not None else (True, _pack(result), False))
        except Exception as error:  # noqa: BLE001 - sent back and raised in order, with its traceback as a note
            error.add_note("traceback in the worker process:\n" + traceback.format_exc().rstrip())
            out.append((False, error, False))
    return out


def _leaf_bytes(value: Any) -> List[Optional[int]]:
    """The bytes each leaf of a packed result takes (None: not a tensor): how slots are laid out."""
    return [leaf.array.nbytes if type(leaf) is _Packed else None for leaf in leaves(value)]


class _Part:
    """Element ``index`` of a chunk computed by a worker process, and the slot lent for its result."""

    __slots__ = ("future", "index", "slot")

    def __init__(self, future: "Future[Any]", index: int, slot: Optional[Slot]) -> None:
        self.future, self.index, self.slot = future, index, slot


def _future_of(item: Any) -> Optional["Future[Any]"]:
    return item.future if type(item) is _Part else None


class _InputError:
    """The input's error, queued behind the elements read before it."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _ParallelMapIterator(BlockIterator):
    def __init__(self, fn: Callable, reopen: Callable[[Optional[dict]], BlockIterator], seed: _MapSeed,
                 lineage: Lineage, state: Optional[dict], size: int, deterministic: bool, threading: Any) -> None:
        self._fn, self._seed, self._lineage = fn, seed, tuple(lineage)
        self._reopen = reopen
        self._in = reopen(state["in"] if state else None)
        self._size, self._deterministic = size, deterministic
        self._processes = threading.workers == "processes"
        self._torch_threads = int(threading.max_intra_op_parallelism)
        first = int(state.get("n", 0)) if state else 0
        self._next = first                      # ordinal of the next element read from the input
        self._low = first + (int(state.get("skip", 0)) if state else 0)  # first ordinal not handed out
        self._handed: Set[int] = {first + int(d) for d in state.get("done", ())} if state else set()
        self._blocks: Deque[Tuple[int, Any]] = deque([(first, state["in"])] if state else [])
        self._flight: Deque[Tuple[int, Any]] = deque()  # (ordinal, Future or a ready value)
        self._ended = False
        self._pool: Optional[WorkerPool] = None
        self._failed: Optional[BaseException] = None
        self._flight_error: Optional[_InputError] = None
        self._slots: Optional[SlotLender] = None  # with processes: shared memory for the results
        self._batch = 1  # the batch size of the consumer, if it batches (rows of the slots' groups)
        self._rows: Optional[RowLender] = None  # with threads and determinism: batch rows for the results

    def batched_by(self, size: int) -> None:
        self._batch = int(size)

    # ------------------------------------------------------------------ reading
    def _start_pool(self) -> WorkerPool:
        pool = WorkerPool(self._size, self._processes, self._fn, self._torch_threads)
        pool.stop_with(self)
        self._pool = pool
        if self._processes:
            self._slots = SlotLender(rows=self._batch)
            weakref.finalize(self, SlotLender.close, self._slots)
        elif self._deterministic:
            self._rows = RowLender(self._batch)  # in order only: out of order, rows would not line up
        return pool

    def _fill(self) -> None:
        pool = self._pool or self._start_pool()
        room = 2 * self._size * _CHUNK - len(self._flight)
        if self._flight:
            room -= room % _CHUNK  # whole tasks only while work is in flight: a task per element
            # would cost a hand-off (a pipe round trip for a process) per element
        # several elements per task; one with deterministic=False on threads (each hands out as it ends)
        task = _CHUNK if self._processes or self._deterministic else 1
        chunk: List[Tuple[int, Any]] = []
        while room > 0 and not self._ended and self._flight_error is None:  # nothing read past an input error
            before = self._in.state()
            try:
                block = self._in.next_block(room)
            except BaseException:  # noqa: BLE001 - read again one by one: the error comes after the elements before it
                block = self._read_up_to_error(before, room)
            if block is None:
                self._ended = True
                break
            self._blocks.append((self._next, before))
            for element in block.elements():
                ordinal = self._next
                self._next += 1
                if ordinal < self._low or ordinal in self._handed:
                    continue  # handed out before the state this iterator was restored from
                if type(element) is LazyBatch:
                    self._spread(pool, chunk)  # what was read before it goes first
                    key = ElementKey(self._seed, self._lineage, ordinal)
                    self._flight.append((ordinal, element.with_map(RowKeyedCall(self._fn, key))))
                else:
                    chunk.append((ordinal, element))
                    if len(chunk) == task:
                        self._send(pool, chunk)
                room -= 1
        self._spread(pool, chunk)
        if self._flight_error is not None:
            self._flight.append((self._next, self._flight_error))
            self._flight_error, self._ended = None, True

    def _spread(self, pool: WorkerPool, chunk: List[Tuple[int, Any]]) -> None:
        """A short last chunk as up to one task per worker (four elements keep two workers busy)."""
        tasks = min(self._size, len(chunk))
        for k in range(tasks):
            part = chunk[k * len(chunk) // tasks:(k + 1) * len(chunk) // tasks]
            self._send(pool, part)
        chunk.clear()

    def _send(self, pool: WorkerPool, chunk: List[Tuple[int, Any]]) -> None:
        """Elements ``chunk`` (ordinal, element) to one worker as one task."""
        ordinals = [o for o, _ in chunk]
        if not self._processes:
            keys = [ElementKey(self._seed, self._lineage, o) for o in ordinals]
            lender = self._rows
            rows = [lender.lend(o) for o in ordinals] if lender is not None else [None] * len(ordinals)
            future = pool.submit(_apply_on_thread, self._fn, [e for _, e in chunk], keys, rows)
            self._flight.extend((o, _Part(future, j, None)) for j, o in enumerate(ordinals))
            chunk.clear()
            return
        slots = [self._slots.lend(o) for o in ordinals]
        future = pool.submit(_apply_in_process, [_pack(e) for _, e in chunk], self._seed(), self._lineage, ordinals,
                             slots)
        self._flight.extend((o, _Part(future, j, slot)) for j, (o, slot) in enumerate(zip(ordinals, slots)))
        chunk.clear()

    def _read_up_to_error(self, before: dict, room: int) -> Optional[Block]:
        """The input failed in a block: reread it from ``before`` one element at a time; the elements
        before the error are mapped and the error is queued after them."""
        self._in = self._reopen(before)
        items: List[Any] = []
        try:
            while len(items) < room:
                block = self._in.next_block(1)
                if block is None:
                    break
                items.extend(block.elements())
        except BaseException as error:  # noqa: BLE001 - the user's exception, raised in order
            self._flight_error = _InputError(error)
        return ListBlock(items) if items else None

    def _result(self, ordinal: int, item: Any) -> Any:
        if type(item) is _InputError:
            self._failed = item.error
            raise item.error
        future = _future_of(item)
        if future is None:
            return item
        try:
            ok, value, placed = future.result()[item.index]
        except BaseException as error:  # noqa: BLE001 - the user's exception, re-raised with a note
            self._fail(error, ordinal)
            raise
        if self._slots is None:  # a worker thread's result, as it is (its large tensors perhaps in rows)
            if not ok:
                self._fail(value, ordinal)
                raise value
            if self._rows is not None:
                if placed:
                    self._rows.learn(value)
                else:
                    self._rows.stop()
            return value
        if placed:
            return _unpack(self._slots.receive(item.slot, value))
        self._slots.give_back(item.slot)
        if not ok:
            self._fail(value, ordinal)
            raise value
        self._slots.learn(_leaf_bytes(value))
        return _unpack(value)

    def _fail(self, error: BaseException, ordinal: int) -> None:
        with_element_note(error, "map function", ordinal)
        self._failed = error
        self._flight.clear()
        if self._pool is not None:
            self._pool.shutdown()

    def next_block(self, limit: int) -> Optional[Block]:
        if self._failed is not None:
            raise self._failed
        self._fill()
        if not self._flight:
            return None
        out = self._take_ordered(limit) if self._deterministic else self._take_done(limit)
        self._prune()
        return ListBlock(out)

    def _prune(self) -> None:
        """Forget the input positions of blocks handed out entirely."""
        blocks, low = self._blocks, self._low
        while len(blocks) > 1 and blocks[1][0] <= low:
            blocks.popleft()

    def _take_ordered(self, limit: int) -> List[Any]:
        out: List[Any] = []
        while self._flight and len(out) < limit:
            ordinal, item = self._flight[0]
            future = _future_of(item)
            if out and future is not None and not future.done():
                break  # hand out what is ready; the caller comes back for more
            out.append(self._result(ordinal, item))
            self._flight.popleft()
            self._low = ordinal + 1
        return out

    def _take_done(self, limit: int) -> List[Any]:
        pending = [f for f in (_future_of(item) for _, item in self._flight) if f is not None]
        if pending and len(pending) == len(self._flight):
            wait(set(pending), return_when=FIRST_COMPLETED)
        out: List[Any] = []
        kept: Deque[Tuple[int, Any]] = deque()
        for ordinal, item in self._flight:
            future = _future_of(item)
            if len(out) < limit and (future is None or future.done()):
                out.append(self._result(ordinal, item))
                self._handed.add(ordinal)
            else:
                kept.append((ordinal, item))
        self._flight = kept
        self._low = kept[0][0] if kept else self._next
        self._handed = {o for o in self._handed if o > self._low}
        return out

    # ---------------------------------------------------------------- position
    def state(self) -> dict:
        low = self._low
        if low >= self._next and not self._handed:
            return {"in": self._in.state(), "n": self._next} if self._next else {"in": self._in.state()}
        self._prune()
        first, before = self._blocks[0]
        return {"in": before, "n": first, "skip": low - first,
                "done": sorted(o - first for o in self._handed if o > low)}
