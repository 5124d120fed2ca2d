"""`shuffle`: buffer semantics, reshuffling, seeds."""
import numpy as np
import pytest
import torch

from distrib.testing.files import load_npy
from distrib.data import Dataset


def values(ds):
    return [int(v) for v in ds]


def test_buffer_at_least_dataset_size_is_a_permutation():
    out = values(Dataset.range(100).shuffle(100, seed=3))
    assert sorted(out) == list(range(100)) and out != list(range(100))
    assert sorted(values(Dataset.range(100).shuffle(1000, seed=3))) == list(range(100))


def test_buffer_of_one_keeps_order():
    assert values(Dataset.range(20).shuffle(1, seed=0)) == list(range(20))


@pytest.mark.parametrize("buffer", [2, 10, 37])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_small_buffer_only_draws_from_the_next_buffer_size_inputs(buffer, seed):
    # tf.data: output t is drawn from a buffer holding at most inputs[0 : t + buffer].
    out = values(Dataset.range(500).shuffle(buffer, seed=seed))
    assert sorted(out) == list(range(500))
    assert all(v < t + buffer for t, v in enumerate(out))
    assert out != list(range(500))


def test_small_buffer_first_element_is_uniform_over_the_buffer():
    firsts = {values(Dataset.range(50).shuffle(5, seed=s).take(1))[0] for s in range(200)}
    assert firsts == {0, 1, 2, 3, 4}


def test_small_buffer_over_values_from_a_generator():
    ds = Dataset.from_generator(lambda: iter(range(300))).shuffle(8, seed=4)
    out = values(ds)
    assert sorted(out) == list(range(300)) and all(v < t + 8 for t, v in enumerate(out))


def test_buffer_over_several_tables_from_files(tmp_path):
    paths = []
    for k in range(3):
        path = tmp_path / f"part{k}.npy"
        np.save(path, np.arange(k * 10, k * 10 + 10))
        paths.append(str(path))
    out = values(Dataset.from_files(paths, load_npy).shuffle(6, seed=1))
    assert sorted(out) == list(range(30)) and all(v < t + 6 for t, v in enumerate(out))


def test_reshuffle_each_iteration():
    ds = Dataset.range(30).shuffle(30, seed=7)
    first, second = values(ds), values(ds)
    assert first != second and sorted(first) == sorted(second)
    epochs = values(ds.repeat(2))
    assert epochs[:30] != epochs[30:]
    fixed = Dataset.range(30).shuffle(30, seed=7, reshuffle_each_iteration=False)
    assert values(fixed) == values(fixed)
    rep = values(fixed.repeat(2))
    assert rep[:30] == rep[30:]


def test_seeded_shuffle_is_reproducible_across_dataset_objects():
    a = values(Dataset.range(40).shuffle(40, seed=11).repeat(2))
    b = values(Dataset.range(40).shuffle(40, seed=11).repeat(2))
    assert a == b


def test_unseeded_shuffle_follows_torch_manual_seed():
    torch.manual_seed(5)
    a = values(Dataset.range(40).shuffle(40))
    torch.manual_seed(5)
    b = values(Dataset.range(40).shuffle(40))
    assert a == b
    c = values(Dataset.range(40).shuffle(40))
    assert c != b  # a second unseeded op in the same run draws another seed


def test_shuffle_over_an_infinite_stream_mixes_epochs():
    out = values(Dataset.range(10).repeat().shuffle(15, seed=2).take(100))
    assert all(0 <= v < 10 for v in out)
    assert sorted(out[:10]) != list(range(10)) or out[:10] != sorted(out[:10])


def test_shuffle_of_batches_keeps_batches_whole():
    out = [b.tolist() for b in Dataset.range(12).batch(3).shuffle(4, seed=0)]
    assert sorted(out) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]


def test_shuffle_arguments_are_checked():
    with pytest.raises(ValueError, match="buffer_size"):
        Dataset.range(3).shuffle(0)
    with pytest.raises(ValueError, match="seed"):
        Dataset.range(3).shuffle(3, seed=-1)
