"""distrib.data.seed_mixing: numpy's SeedSequence mixing, bit for bit, and resumable after a prefix."""
import random

import numpy as np
import pytest

from distrib.data.seed_mixing import mix_seed, mix_seed_after


def numpy_seed(*parts):
    words = [int(p) & 0xFFFFFFFFFFFFFFFF for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0]) >> 1


EDGES = [0, 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 63 - 1, 2 ** 64 - 1]


@pytest.mark.parametrize("count", range(0, 9))
def test_every_length_and_edge_value_equals_numpy(count):
    rng = random.Random(count)
    for _ in range(300):
        parts = [rng.choice(EDGES + [rng.getrandbits(rng.choice([8, 32, 40, 64]))]) for _ in range(count)]
        assert mix_seed(*parts) == numpy_seed(*parts), parts


def test_a_resumed_prefix_equals_the_whole_sequence():
    rng = random.Random(5)
    for _ in range(2000):
        parts = [rng.getrandbits(rng.choice([1, 31, 33, 63])) for _ in range(rng.randint(0, 8))]
        cut = rng.randint(0, len(parts))
        assert mix_seed_after(tuple(parts[:cut]), *parts[cut:]) == numpy_seed(*parts), (parts, cut)


def test_negative_parts_wrap_to_64_bits_as_before():
    assert mix_seed(-1, 3) == numpy_seed(2 ** 64 - 1, 3)
    assert mix_seed_after((-1,), 3) == mix_seed(-1, 3)


def test_long_sequences_grow_the_hash_constants():
    parts = list(range(1, 300))
    assert mix_seed(*parts) == numpy_seed(*parts)
    assert mix_seed_after(tuple(parts[:10]), *parts[10:]) == numpy_seed(*parts)
