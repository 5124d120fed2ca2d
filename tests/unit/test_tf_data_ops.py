"""tf.data operators (window, scan, group_by_window, ...) against TensorFlow 2.21's recorded outputs,
and exact resume of every new stateful operator.

tests/tf_reference/generate_data_ops.py ran `data_ops_scenarios.py` on
TensorFlow (tests/data/tf_reference/data_ops.json): elements, element_spec
(shapes with None, dtypes), cardinality, values and errors. This replays the
same programs on distrib.
"""
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

TF_REFERENCE = Path(__file__).resolve().parents[1] / "tf_reference"
sys.path.insert(0, str(TF_REFERENCE))

from data_ops_scenarios import UNORDERED, describe, scenarios, spec_json  # noqa: E402

from distrib.data import Dataset, TensorSpec  # noqa: E402
from distrib.data.transforms.element_state import DatasetSpec  # noqa: E402
from distrib.data.transforms.windowing import RaggedList, RaggedSpec  # noqa: E402

REFERENCE = json.loads((TF_REFERENCE.parent / "data" / "tf_reference" / "data_ops.json").read_text())["scenarios"]


class Ops:
    def fill_n(self, n):
        return torch.full((int(n),), int(n))

    def int64(self, v):
        return torch.tensor(v, dtype=torch.int64)

    def np_int64(self, values):
        return np.asarray(values, dtype=np.int64)

    def spec(self, shape, dtype):
        return TensorSpec(tuple(shape), getattr(torch, dtype))

    def dtype(self, name):
        return getattr(torch, name)

    def length(self, x):
        return x.shape[0]


def _leaf_spec(s):
    if isinstance(s, DatasetSpec):
        return {"dataset": spec_json(s.element_spec, _leaf_spec)}
    out = {"shape": list(s.shape), "dtype": str(s.dtype).replace("torch.", "")}
    if isinstance(s, RaggedSpec):
        out["ragged"] = True
    return out


def _ragged(v):
    return [t.tolist() for t in v] if isinstance(v, RaggedList) else None


@pytest.fixture(scope="module")
def got():
    return {name: describe(make, lambda v: isinstance(v, Dataset), _ragged, _leaf_spec)
            for name, make in scenarios(Dataset, Ops()).items()}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_operator_matches_tensorflow(got, name):
    want, have = REFERENCE[name], got[name]
    if "error" in want:
        assert "error" in have, f"TensorFlow raised {want['error']} on {name}, distrib gave {have}"
        return
    assert "error" not in have, f"distrib raised {have['error']} on {name}"
    if "value" in want:
        assert have["value"] == pytest.approx(want["value"]) if not isinstance(want["value"], list) \
            else json.dumps(have["value"]) == json.dumps(want["value"])
        return
    assert have["spec"] == want["spec"], f"{name}: element_spec"
    assert have["cardinality"] == want["cardinality"], f"{name}: cardinality"
    if name in UNORDERED:
        assert Counter(map(json.dumps, have["elements"])) == Counter(map(json.dumps, want["elements"]))
    else:
        assert have["elements"] == want["elements"]


# ------------------------------------------------------------------ exact resume
def _lengths():
    for n in [1, 4, 2, 6, 3, 5, 7, 2, 8, 3, 1]:
        yield list(range(1, n + 1))


def _seq():
    return Dataset.from_generator(_lengths, output_signature=TensorSpec((None,), torch.int32))


RESUMABLE = {
    "window": lambda: Dataset.range(11).window(3, 2).flat_map(lambda w: w.batch(3)),
    "window_dict_skip": lambda: Dataset.from_tensor_slices({"a": list(range(12))}).window(2, shift=3).map(
        lambda d: d["a"].reduce(torch.tensor(0), lambda s, x: s + x)),
    "rebatch": lambda: Dataset.range(13).batch(4).rebatch([2, 3]),
    "ragged_batch": lambda: _seq().ragged_batch(3),
    "scan": lambda: Dataset.range(9).scan((torch.tensor(0.5), torch.tensor(1)),
                                           lambda s, x: ((s[0] * 2 + x, s[1] + 1), s[0] * x)),
    "unique": lambda: Dataset.from_tensor_slices([4, 1, 4, 2, 1, 7, 2, 9, 4, 0]).unique(),
    "take_while": lambda: Dataset.range(20).take_while(lambda x: x < 7),
    "group_by_window": lambda: Dataset.range(17).group_by_window(
        lambda x: x % 3, lambda k, w: w.batch(2).map(lambda b: b * 10 + k), window_size=4),
    "bucket": lambda: _seq().bucket_by_sequence_length(lambda x: x.shape[0], [3, 6], [2, 2, 2]),
    "choose": lambda: Dataset.choose_from_datasets(
        [Dataset.range(4), Dataset.range(10, 13).shuffle(3, seed=1)],
        Dataset.from_tensor_slices(np.array([1, 0, 0, 1, 1, 0, 1, 0, 0], np.int64)), stop_on_empty_dataset=False),
    "sample": lambda: Dataset.sample_from_datasets([Dataset.range(6), Dataset.range(100, 106)], seed=5),
    "counter": lambda: Dataset.counter(3, -2).batch(3).take(5),
}


def _plain(e):
    if isinstance(e, (tuple, list)):
        return [_plain(v) for v in e]
    return e.tolist() if isinstance(e, torch.Tensor) else e


@pytest.mark.parametrize("name", sorted(RESUMABLE))
@pytest.mark.parametrize("k", [0, 1, 3])
def test_resume_continues_exactly(name, k):
    full = [_plain(e) for e in RESUMABLE[name]()]  # each a first pass: a shuffle's order is the same
    assert len(full) > 3, full
    it = iter(RESUMABLE[name]())
    head = [_plain(next(it)) for _ in range(k)]
    saved = json.loads(json.dumps(it.state_dict()))  # a checkpoint holds JSON
    fresh = iter(RESUMABLE[name]())
    fresh.load_state_dict(saved)
    assert head + [_plain(e) for e in fresh] == full


def test_sample_from_datasets_draws_by_weight_and_reproducibly():
    ds = Dataset.sample_from_datasets([Dataset.range(0, 4000).repeat(), Dataset.range(-4000, 0).repeat()],
                                      weights=[0.8, 0.2], seed=11).take(2000)
    values = [int(v) for v in ds]
    share = sum(v >= 0 for v in values) / len(values)
    assert 0.76 < share < 0.84
    assert values == [int(v) for v in ds]  # a seeded sample replays the same order


def test_errors_are_one_line():
    with pytest.raises(ValueError, match="window: size must be >= 1"):
        Dataset.range(3).window(0)
    with pytest.raises(TypeError, match="unique: elements must be int32, int64 or string scalars"):
        list(Dataset.from_tensor_slices([1.0, 2.0]).unique())
    with pytest.raises(ValueError, match="exactly one of window_size and window_size_func"):
        Dataset.range(3).group_by_window(lambda x: x, lambda k, w: w)
    with pytest.raises(ValueError, match="bucket_batch_sizes needs"):
        Dataset.range(3).bucket_by_sequence_length(lambda x: 1, [2], [1])
    with pytest.raises(ValueError, match="choice 5 is not in"):
        list(Dataset.choose_from_datasets([Dataset.range(2)], Dataset.from_tensors(np.int64(5))))


# ------------------------------------------------------------------ distribution
DISTRIBUTED = {
    "rebatch": lambda: Dataset.range(23).batch(5).rebatch(4),
    "window_batches": lambda: Dataset.range(15).window(4, 2, drop_remainder=True).flat_map(lambda w: w.batch(4)),
    "bucket": lambda: _seq().bucket_by_sequence_length(lambda x: x.shape[0], [4], [4, 4]),
    "sample_then_batch": lambda: Dataset.sample_from_datasets(
        [Dataset.range(10), Dataset.range(100, 110)], seed=2).batch(4),
    "scan_batch": lambda: Dataset.range(10).scan(torch.tensor(0), lambda s, x: (s + x, s + x)).batch(4),
}


@pytest.mark.parametrize("name", sorted(DISTRIBUTED))
def test_distributed_replicas_split_each_global_batch(name):
    from distrib.testing.simulated import run_workers

    expected = [_plain(b) for b in DISTRIBUTED[name]()]

    def body(strategy):
        return [_plain(b) for b in strategy.experimental_distribute_dataset(DISTRIBUTED[name]())]

    per_worker = run_workers(body, 2)
    assert all(len(w) == len(expected) for w in per_worker)
    for step, global_batch in enumerate(expected):
        parts = [w[step] for w in per_worker]
        width = max((len(r) for p in parts for r in p if isinstance(r, list)), default=0)
        joined = [r + [0] * (width - len(r)) if isinstance(r, list) else r for p in parts for r in p]
        assert joined == [r + [0] * (width - len(r)) if isinstance(r, list) else r for r in global_batch]
