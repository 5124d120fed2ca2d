"""Dataset operators against tf.data's documented semantics."""
import numpy as np
import pytest
import torch

from distrib.data import (AUTOTUNE, INFINITE, UNKNOWN, AutoShardPolicy, Dataset, Options,
                          TensorSpec, experimental)


def values(ds):
    return [v.tolist() for v in ds]


# ------------------------------------------------------------------ sources
def test_from_tensor_slices_mirrors_structure_and_dtypes():
    x = np.arange(12, dtype=np.float64).reshape(6, 2)
    y = np.arange(6, dtype=np.int64)
    first = next(iter(Dataset.from_tensor_slices((x, y))))
    assert isinstance(first, tuple) and first[0].dtype == torch.float64 and first[1].dtype == torch.int64
    assert first[0].tolist() == [0.0, 1.0]
    d = next(iter(Dataset.from_tensor_slices({"a": x / np.float32(255), "b": [1, 2, 3, 4, 5, 6]})))
    assert set(d) == {"a", "b"} and d["b"].dtype == torch.int32  # TF: Python ints are int32
    assert Dataset.from_tensor_slices((x, y)).cardinality() == 6


def test_from_tensor_slices_seed_dtype_rule_float32_division():
    x = np.arange(6, dtype=np.uint8).reshape(3, 2)
    batch = next(iter(Dataset.from_tensor_slices(x / np.float32(255)).batch(3)))
    assert batch.dtype == torch.float32


def test_from_tensor_slices_list_becomes_a_tensor():
    assert values(Dataset.from_tensor_slices([[1, 2], [3, 4]])) == [[1, 2], [3, 4]]


def test_from_tensor_slices_errors():
    with pytest.raises(ValueError, match="at least one dimension"):
        Dataset.from_tensor_slices(torch.tensor(3.0))
    with pytest.raises(ValueError, match="different leading sizes"):
        Dataset.from_tensor_slices((np.zeros(3), np.zeros(4)))
    with pytest.raises(TypeError, match="dtype object"):  # strings are fine (test_data_strings.py)
        Dataset.from_tensor_slices(np.array([{"a": 1}, None], dtype=object))


def test_from_tensors_is_one_element_and_seed_003_pipeline():
    ds = Dataset.from_tensors(([1.0], [1.0]))
    assert ds.cardinality() == 1
    batches = list(ds.repeat(100).batch(10))
    assert len(batches) == 10 and batches[0][0].shape == (10, 1)
    assert all(torch.equal(b[1], torch.ones(10, 1)) for b in batches)


@pytest.mark.parametrize("args,expected", [
    ((5,), [0, 1, 2, 3, 4]), ((2, 8, 2), [2, 4, 6]), ((5, 0, -2), [5, 3, 1]), ((3, 3), [])])
def test_range(args, expected):
    ds = Dataset.range(*args)
    assert values(ds) == expected and ds.cardinality() == len(expected)
    assert ds.element_spec == TensorSpec((), torch.int64)


def test_from_generator_converts_checks_and_reruns():
    def gen():
        for i in range(4):
            yield i, np.full(2, i, dtype=np.float64)

    sig = (TensorSpec((), torch.int64), TensorSpec((2,), torch.float32))
    ds = Dataset.from_generator(gen, output_signature=sig)
    first = list(ds)
    assert [e[0].item() for e in first] == [0, 1, 2, 3] and first[1][1].dtype == torch.float32
    assert len(list(ds)) == 4  # called anew on every pass
    assert ds.cardinality() == UNKNOWN and ds.element_spec == sig
    with pytest.raises(ValueError, match="does not match"):
        list(Dataset.from_generator(gen, output_signature=(TensorSpec((), torch.int64),
                                                           TensorSpec((3,), torch.float32))))
    with pytest.raises(TypeError, match="pass the function, not its call"):
        Dataset.from_generator(gen())


def test_from_generator_args():
    ds = Dataset.from_generator(lambda n: iter(range(n)), args=(3,))
    assert values(ds) == [0, 1, 2]


# --------------------------------------------------------------- transforms
def test_map_unpacks_tuples_and_sees_batches_after_batch():
    ds = Dataset.from_tensor_slices((np.arange(4), np.arange(4) * 10)).map(lambda a, b: a + b)
    assert values(ds) == [0, 11, 22, 33]
    sums = Dataset.range(6).batch(3).map(lambda b: b.sum())
    assert values(sums) == [3, 12]
    d = Dataset.from_tensor_slices({"v": np.arange(3)}).map(lambda e: {"v": e["v"] * 2})
    assert [e["v"].item() for e in d] == [0, 2, 4]


def test_filter_keeps_matching_and_has_unknown_cardinality():
    ds = Dataset.range(10).filter(lambda x: x % 3 == 0)
    assert values(ds) == [0, 3, 6, 9] and ds.cardinality() == UNKNOWN
    with pytest.raises(ValueError, match="scalar boolean"):
        list(Dataset.range(4).batch(2).filter(lambda b: b > 0))


def test_batch_remainder_and_spec():
    assert values(Dataset.range(7).batch(3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert values(Dataset.range(7).batch(3, drop_remainder=True)) == [[0, 1, 2], [3, 4, 5]]
    assert Dataset.range(7).batch(3).cardinality() == 3
    assert Dataset.range(7).batch(3, drop_remainder=True).cardinality() == 2
    assert Dataset.range(7).batch(3).element_spec == TensorSpec((None,), torch.int64)
    assert Dataset.range(7).batch(3, True).element_spec == TensorSpec((3,), torch.int64)
    with pytest.raises(ValueError, match="batch_size"):
        Dataset.range(3).batch(0)


def test_batch_of_different_shapes_is_a_clear_error():
    ds = Dataset.from_generator(lambda: iter([np.zeros(2), np.zeros(3)]))
    with pytest.raises(ValueError, match="different shapes"):
        list(ds.batch(2))


def test_unbatch_round_trips_and_after_map():
    assert values(Dataset.range(5).batch(2).unbatch()) == [0, 1, 2, 3, 4]
    assert values(Dataset.range(5).batch(2).map(lambda b: b * 10).unbatch()) == [0, 10, 20, 30, 40]
    assert Dataset.range(5).batch(2).unbatch().cardinality() == 5
    assert Dataset.range(5).batch(2, drop_remainder=True).unbatch().cardinality() == 4


@pytest.mark.parametrize("count,expected", [(0, []), (1, [0, 1]), (3, [0, 1, 0, 1, 0, 1])])
def test_repeat_counts(count, expected):
    ds = Dataset.range(2).repeat(count)
    assert values(ds) == expected and ds.cardinality() == len(expected)


def test_repeat_forever_and_of_empty():
    ds = Dataset.range(3).repeat()
    assert ds.cardinality() == INFINITE
    assert values(ds.take(7)) == [0, 1, 2, 0, 1, 2, 0]
    assert values(Dataset.range(0).repeat()) == []
    assert Dataset.range(0).repeat().cardinality() == 0
    assert values(Dataset.range(5).filter(lambda x: x > 9).repeat()) == []


def test_take_and_skip():
    assert values(Dataset.range(5).take(3)) == [0, 1, 2]
    assert values(Dataset.range(5).take(-1)) == [0, 1, 2, 3, 4]
    assert values(Dataset.range(5).skip(3)) == [3, 4]
    assert values(Dataset.range(5).skip(-1)) == []
    assert Dataset.range(5).take(9).cardinality() == 5
    assert Dataset.range(5).repeat().take(9).cardinality() == 9
    assert Dataset.range(5).skip(9).cardinality() == 0
    assert Dataset.range(5).repeat().skip(2).cardinality() == INFINITE


@pytest.mark.parametrize("n,shards", [(10, 3), (7, 2), (2, 4)])
def test_shard_takes_every_nth(n, shards):
    parts = [values(Dataset.range(n).shard(shards, i)) for i in range(shards)]
    for i, part in enumerate(parts):
        assert part == list(range(i, n, shards))
        assert Dataset.range(n).shard(shards, i).cardinality() == len(part)
    with pytest.raises(ValueError, match="index must be in"):
        Dataset.range(3).shard(2, 2)


def test_shard_of_batches_and_infinite_streams():
    assert values(Dataset.range(8).batch(2).shard(2, 1)) == [[2, 3], [6, 7]]
    assert values(Dataset.range(3).repeat().shard(2, 0).take(4)) == [0, 2, 1, 0]


def test_cache_freezes_an_earlier_shuffle_and_replays():
    ds = Dataset.range(8).shuffle(8).cache().repeat(3)
    out = values(ds)
    assert out[:8] == out[8:16] == out[16:] and sorted(out[:8]) == list(range(8))
    calls = []
    cached = Dataset.range(4).map(lambda x: (calls.append(1), x)[1]).cache()
    assert values(cached) == values(cached) == [0, 1, 2, 3]
    assert len(calls) == 4


def test_cache_partial_pass_is_not_kept():
    calls = []
    cached = Dataset.range(4).map(lambda x: (calls.append(1), x)[1]).cache()
    assert values(cached.take(2)) == [0, 1]
    assert values(cached) == [0, 1, 2, 3] and len(calls) == 6


def test_prefetch_changes_nothing():
    assert values(Dataset.range(5).prefetch(AUTOTUNE)) == [0, 1, 2, 3, 4]
    assert values(Dataset.range(5).prefetch(2)) == [0, 1, 2, 3, 4]


# ------------------------------------------------------------ inspection
def test_len_and_cardinality_constants():
    assert len(Dataset.range(4).batch(3)) == 2
    with pytest.raises(TypeError, match="infinite"):
        len(Dataset.range(4).repeat())
    with pytest.raises(TypeError, match="unknown"):
        len(Dataset.range(4).filter(lambda x: True))
    assert experimental.cardinality(Dataset.range(4)) == 4
    assert experimental.INFINITE_CARDINALITY == INFINITE == -1 and experimental.UNKNOWN_CARDINALITY == UNKNOWN == -2


def test_element_spec_read_from_first_element_after_map():
    ds = Dataset.range(4).map(lambda x: (x, torch.zeros(3))).batch(2)
    spec = ds.element_spec
    assert spec == (TensorSpec((None,), torch.int64), TensorSpec((None, 3), torch.float32))


def test_as_numpy_iterator():
    assert [v.tolist() for v in Dataset.range(3).as_numpy_iterator()] == [0, 1, 2]


# ------------------------------------------------------------------ options
def test_options_seed_spelling_and_merge():
    options = Options()
    options.experimental_distribute.auto_shard_policy = experimental.AutoShardPolicy.OFF
    assert options.distribute.auto_shard_policy is AutoShardPolicy.OFF
    ds = Dataset.range(3).with_options(options)
    assert ds.options().distribute.auto_shard_policy is AutoShardPolicy.OFF
    later = Options()
    later.distribute.auto_shard_policy = AutoShardPolicy.DATA
    assert ds.with_options(later).options().distribute.auto_shard_policy is AutoShardPolicy.DATA
    assert ds.with_options(Options()).options().distribute.auto_shard_policy is AutoShardPolicy.OFF
    assert values(ds) == [0, 1, 2]


def test_options_reject_typos_and_bad_policies():
    with pytest.raises(AttributeError, match="auto_shard_policy"):
        Options().distribute.auto_shard_polcy = AutoShardPolicy.OFF
    with pytest.raises(ValueError, match="AUTO, FILE, DATA or OFF"):
        Options().distribute.auto_shard_policy = "SOMETIMES"
    options = Options()
    options.experimental_distribute.auto_shard_policy = "data"
    assert options.distribute.auto_shard_policy is AutoShardPolicy.DATA
