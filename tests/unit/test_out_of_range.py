"""End of data: `for`/`next()` end with StopIteration, `get_next()` raises OutOfRangeError (as in TF).

OutOfRangeError is not a StopIteration, so a generator that calls
``get_next()`` past the end lets it through instead of turning it into a
RuntimeError (PEP 479), and a `for` loop cannot swallow it.
"""
import pytest

from distrib.data import Dataset, OutOfRangeError
from distrib.errors import DistribError
from distrib.testing.simulated import run_workers


def test_out_of_range_error_is_a_distrib_error_and_not_a_stop_iteration():
    assert issubclass(OutOfRangeError, DistribError)
    assert not issubclass(OutOfRangeError, StopIteration)


def test_a_dataset_iterator_ends_for_loops_and_next_with_a_plain_stop_iteration():
    assert [t.item() for t in Dataset.range(3)] == [0, 1, 2]
    it = iter(Dataset.range(1))
    next(it)
    with pytest.raises(StopIteration) as ended:
        next(it)
    assert type(ended.value) is StopIteration
    with pytest.raises(OutOfRangeError, match="end of the dataset"):
        it.get_next()


def test_a_generator_calling_get_next_past_the_end_gets_out_of_range_not_runtime_error():
    it = iter(Dataset.range(2))

    def pairs():
        while True:
            yield it.get_next().item(), it.get_next().item()

    got = []
    with pytest.raises(OutOfRangeError):
        for pair in pairs():
            got.append(pair)
    assert got == [(0, 1)]


def test_distributed_iterators_end_the_same_way_on_every_replica():
    def body(strategy):
        dist = strategy.experimental_distribute_dataset(Dataset.range(8).batch(4))
        by_for = [b.tolist() for b in dist]
        it = iter(dist)
        by_next = [next(it).tolist(), next(it).tolist()]
        with pytest.raises(StopIteration) as ended:
            next(it)
        plain = type(ended.value) is StopIteration

        def batches():
            while True:
                yield iter_again.get_next().tolist()

        iter_again = iter(dist)
        seen = []
        try:
            for batch in batches():
                seen.append(batch)
        except OutOfRangeError:
            ended_with = "OutOfRangeError"
        except RuntimeError:
            ended_with = "RuntimeError"
        return by_for, by_next, plain, seen, ended_with

    results = run_workers(body, 2)
    assert results[0][0] == [[0, 1], [4, 5]] and results[1][0] == [[2, 3], [6, 7]]
    for by_for, by_next, plain, seen, ended_with in results:
        assert by_next == by_for == seen
        assert plain and ended_with == "OutOfRangeError"
