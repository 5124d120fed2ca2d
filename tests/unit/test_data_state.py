"""Checkpointable iterator positions: a restored iterator yields exactly the remaining elements."""
import json

import numpy as np
import pytest
import torch

from distrib.testing.files import load_npy
from distrib.data import Dataset


def _files(tmp_path, sizes):
    paths = []
    for k, n in enumerate(sizes):
        path = tmp_path / f"f{k}.npy"
        np.save(path, np.arange(100 * k, 100 * k + n))
        paths.append(str(path))
    return paths


def _pipelines(tmp_path):
    x = np.random.default_rng(0).random((50, 3)).astype(np.float32)
    y = np.arange(50)
    files = _files(tmp_path, [7, 0, 12, 5])
    return {
        "seed pipeline": lambda: Dataset.from_tensor_slices((x, y)).shuffle(50).repeat().batch(8),
        "small buffer": lambda: Dataset.from_tensor_slices((x, y)).shuffle(7).repeat(3).batch(5),
        "repeat then shuffle": lambda: Dataset.range(13).repeat().shuffle(20).batch(4),
        "nested shuffles": lambda: Dataset.range(9).shuffle(9).repeat(4).shuffle(5).batch(2),
        "cache": lambda: Dataset.range(11).shuffle(11).cache().shuffle(4).repeat(3).batch(3),
        "unbatch": lambda: Dataset.range(30).batch(7).shuffle(3).unbatch().repeat(2).batch(4),
        "shard take skip": lambda: Dataset.range(100).shuffle(100).shard(3, 1).skip(2).take(25).batch(3),
        "map filter": lambda: Dataset.range(60).map(lambda v: v * 3).filter(lambda v: v % 2 == 0)
                                      .shuffle(10).repeat(2).batch(4),
        "generator": lambda: Dataset.from_generator(lambda: iter(range(40))).shuffle(6).batch(3),
        "files": lambda: Dataset.from_files(files, load_npy).shuffle(9).repeat(2).batch(4),
        "batch-level map": lambda: Dataset.range(40).shuffle(40).batch(6).map(lambda b: b * 2),
    }


def _take(it, n):
    out = []
    for _ in range(n):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return [o.tolist() if isinstance(o, torch.Tensor) else [t.tolist() for t in o] for o in out]


@pytest.mark.parametrize("name", ["seed pipeline", "small buffer", "repeat then shuffle",
                                  "nested shuffles", "cache", "unbatch", "shard take skip",
                                  "map filter", "generator", "files", "batch-level map"])
@pytest.mark.parametrize("at", [0, 1, 4, 13])
def test_restore_continues_exactly_in_a_fresh_pipeline(tmp_path, name, at):
    make = _pipelines(tmp_path)[name]
    torch.manual_seed(1)
    ds = make()
    first = iter(ds)
    _take(first, 2)                      # a first pass, so the saved iterator is the second one
    it = iter(ds)
    _take(it, at)
    state = json.loads(json.dumps(it.state_dict()))  # plain JSON
    expected = _take(it, 30)
    torch.manual_seed(999)               # a new process would draw other unseeded seeds
    fresh = iter(make())
    fresh.load_state_dict(state)
    assert _take(fresh, 30) == expected


def test_next_pass_after_restore_is_the_same_as_without_restore():
    torch.manual_seed(3)
    ds = Dataset.range(20).shuffle(20).batch(5)
    it = iter(ds)
    next(it)
    state = it.state_dict()
    rest = _take(it, 10)
    following = _take(iter(ds), 10)
    torch.manual_seed(4)
    ds2 = Dataset.range(20).shuffle(20).batch(5)
    it2 = iter(ds2)
    it2.load_state_dict(state)
    assert _take(it2, 10) == rest
    assert _take(iter(ds2), 10) == following


def test_restore_at_the_end_stays_ended():
    ds = Dataset.range(5).batch(2)
    it = iter(ds)
    assert len(_take(it, 10)) == 3
    again = iter(ds)
    again.load_state_dict(it.state_dict())
    assert _take(again, 3) == []


def test_state_from_another_pipeline_is_refused():
    it = iter(Dataset.range(5).batch(2))
    other = iter(Dataset.range(5).shuffle(5).batch(2))
    with pytest.raises(ValueError, match="same pipeline"):
        other.load_state_dict(it.state_dict())
    with pytest.raises(ValueError, match="not a distrib.data iterator state"):
        other.load_state_dict({"foo": 1})


def test_get_next_and_optional():
    from distrib.data import OutOfRangeError

    it = iter(Dataset.range(2))
    assert it.get_next().item() == 0
    opt = it.get_next_as_optional()
    assert opt.has_value() and opt.get_value().item() == 1
    empty = it.get_next_as_optional()
    assert not empty.has_value()
    with pytest.raises(ValueError, match="has_value"):
        empty.get_value()
    with pytest.raises(OutOfRangeError):
        it.get_next()
