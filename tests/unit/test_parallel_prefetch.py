"""Background ``prefetch`` and parallel ``interleave``: bounded read-ahead, same order, exact resume."""
import gc
import threading
import time

import pytest
import torch

from distrib.data import AUTOTUNE, Dataset


def _wait_until(predicate, deadline_s=20.0):
    """Poll ``predicate`` until true or the deadline (never a fixed sleep)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.005)  # poll: the loop above ends at the deadline
    return predicate()


class Recorder:
    """A generator source that records how far it was read and how far ahead of the consumer."""

    def __init__(self, n):
        self.n, self.read, self.consumed, self.most_ahead = n, 0, 0, 0

    def __call__(self):
        for i in range(self.n):
            self.read = i + 1
            self.most_ahead = max(self.most_ahead, self.read - self.consumed)
            yield torch.tensor([i, i * i])


@pytest.mark.parametrize("size", [1, 3])
def test_prefetch_reads_ahead_in_the_background_and_never_more_than_its_buffer(size):
    source = Recorder(60)
    it = iter(Dataset.from_generator(source).map(lambda x: x + 1).prefetch(size))
    got = []
    for k in range(40):
        got.append(next(it).tolist())
        source.consumed = k + 1
        if k % 10 == 0:  # the thread fills the buffer while the consumer waits
            assert _wait_until(lambda: source.read >= source.consumed + size)
    assert got == [[i + 1, i * i + 1] for i in range(40)]
    assert source.most_ahead <= size + 1  # +1: the element just handed out, counted before `consumed` moved


def test_prefetch_yields_the_same_elements_and_resumes_exactly_with_elements_buffered():
    def make():
        return Dataset.range(50).shuffle(50, seed=1).map(lambda x: x * 3).batch(4).prefetch(AUTOTUNE)

    whole = [b.tolist() for b in make()]
    assert whole == [b.tolist() for b in Dataset.range(50).shuffle(50, seed=1).map(lambda x: x * 3).batch(4)]
    it = iter(make())
    head = [next(it).tolist() for _ in range(5)]
    state = it.state_dict()  # the thread has read ahead of this
    again = iter(make())
    again.load_state_dict(state)
    assert head + [b.tolist() for b in again] == whole
    assert [b.tolist() for b in it] == whole[5:]


def test_prefetch_after_batch_of_in_memory_rows_stays_lazy():
    from distrib.data.blocks import LazyBatch

    ds = Dataset.from_tensor_slices(torch.arange(10.0)).batch(4).prefetch(2)
    assert type(iter(ds).next_element()) is LazyBatch
    assert [b.tolist() for b in ds] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0]]


class Bad(RuntimeError):
    pass


def test_an_error_while_reading_ahead_surfaces_in_order():
    def f(x):
        if int(x) == 6:
            raise Bad("six")
        return x

    it = iter(Dataset.range(10).map(f).prefetch(4))
    assert [int(next(it)) for _ in range(6)] == list(range(6))
    with pytest.raises(Bad, match="six"):
        next(it)


def _threads(prefix):
    """The live threads named ``prefix...`` (a set: an earlier test's may still be winding down)."""
    return {t for t in threading.enumerate() if t.name.startswith(prefix)}


def test_the_prefetch_thread_stops_when_the_iterator_is_dropped_or_exhausted():
    before = _threads("distrib-prefetch")
    it = iter(Dataset.range(10_000).map(lambda x: x).prefetch(2))
    next(it)
    started = _threads("distrib-prefetch") - before
    assert len(started) == 1
    del it
    gc.collect()
    assert _wait_until(lambda: not (started & _threads("distrib-prefetch")))
    before = _threads("distrib-prefetch")
    done = iter(Dataset.range(5).map(lambda x: x).prefetch(2))
    assert [int(v) for v in done] == list(range(5))
    assert _wait_until(lambda: not (_threads("distrib-prefetch") - before))


def files_like(x):
    return Dataset.range(int(x) * 5 + 1).map(lambda v: v + 100 * x)


@pytest.mark.parametrize("cycle,block", [(2, 1), (3, 2), (4, 3)])
def test_parallel_interleave_keeps_the_serial_order(cycle, block):
    serial = Dataset.range(7).interleave(files_like, cycle_length=cycle, block_length=block)
    parallel = Dataset.range(7).interleave(files_like, cycle_length=cycle, block_length=block,
                                           num_parallel_calls=3)
    assert [int(v) for v in parallel] == [int(v) for v in serial]


def test_parallel_interleave_reads_on_worker_threads():
    readers = set()

    def opened(x):
        def note(v):
            readers.add(threading.current_thread().name)
            return v
        return Dataset.range(4).map(note)

    list(Dataset.range(4).interleave(opened, cycle_length=2, num_parallel_calls=2))
    assert readers and all(name.startswith("distrib-data") for name in readers)


@pytest.mark.parametrize("stop", [1, 6, 13, 20])
def test_parallel_interleave_resumes_exactly_with_chunks_read_ahead(stop):
    def make():
        return Dataset.range(6).interleave(files_like, cycle_length=3, block_length=2, num_parallel_calls=3)

    whole = [int(v) for v in make()]
    it = iter(make())
    head = [int(next(it)) for _ in range(stop)]
    again = iter(make())
    again.load_state_dict(it.state_dict())
    assert head + [int(v) for v in again] == whole
