"""enumerate / zip / concatenate / interleave / flat_map / padded_batch / from_generator / text files,
and strings through the pipeline (TF's exact outputs are checked in test_tf_data_surface.py)."""
import gzip
import json

import numpy as np
import pytest
import torch

from distrib.data import STRING, Dataset, TensorSpec, TextLineDataset


def _plain(value):
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.str_):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _take(it, n):
    out = []
    for _ in range(n):
        try:
            out.append(_plain(next(it)))
        except StopIteration:
            break
    return out


def _lines(tmp_path, per_file):
    paths = []
    for k, n in enumerate(per_file):
        path = tmp_path / f"part-{k}.txt"
        path.write_text("".join(f"f{k}-l{i}\n" for i in range(n)))
        paths.append(str(path))
    return paths


def _pipelines(tmp_path):
    _lines(tmp_path, [3, 0, 5, 2])
    return {
        "enumerate": lambda: Dataset.range(20).shuffle(20).enumerate(3).batch(3),
        "zip": lambda: Dataset.zip(Dataset.range(30).shuffle(7), Dataset.range(100, 125)).batch(4),
        "concatenate": lambda: Dataset.range(7).shuffle(7).concatenate(Dataset.range(50, 60)).repeat(2).batch(3),
        "interleave": lambda: Dataset.range(1, 8).shuffle(7).interleave(
            lambda x: Dataset.range(x).map(lambda y: 10 * x + y), cycle_length=3, block_length=2).batch(4),
        "flat_map": lambda: Dataset.range(6).flat_map(lambda x: Dataset.range(x)).shuffle(5).batch(3),
        "padded_batch": lambda: Dataset.range(1, 12).shuffle(11).map(
            lambda n: torch.arange(int(n))).padded_batch(3),
        "text": lambda: Dataset.list_files(str(tmp_path / "part-*.txt"), shuffle=True, seed=2).interleave(
            TextLineDataset, cycle_length=2).batch(3),
        "strings": lambda: Dataset.from_tensor_slices((["a", "b", "c", "d", "e"], [1, 2, 3, 4, 5]))
                                   .shuffle(5).repeat(3).batch(2),
        "from_generator": lambda: Dataset.from_generator(
            lambda: iter([("w" * i, [i] * (i % 3)) for i in range(17)]),
            output_types=("string", torch.int64), output_shapes=([], [None])).padded_batch(4),
    }


NAMES = ["enumerate", "zip", "concatenate", "interleave", "flat_map", "padded_batch", "text",
         "strings", "from_generator"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("at", [0, 1, 3])
def test_new_ops_restore_exactly(tmp_path, name, at):
    make = _pipelines(tmp_path)[name]
    torch.manual_seed(1)
    ds = make()
    _take(iter(ds), 2)                   # a first pass, so the saved iterator is the second one
    it = iter(ds)
    _take(it, at)
    state = json.loads(json.dumps(it.state_dict()))
    expected = _take(it, 40)
    assert expected, "nothing left to compare"
    torch.manual_seed(999)
    fresh = iter(make())
    fresh.load_state_dict(state)
    assert _take(fresh, 40) == expected


def test_strings_come_out_as_str_and_batch_to_str_arrays():
    ds = Dataset.from_tensor_slices((np.array([b"ab", b"c"]), [1, 2]))
    first = next(iter(ds))
    assert isinstance(first[0], str) and first[0] == "ab"
    assert ds.element_spec[0] == TensorSpec((), STRING)
    batch = next(iter(ds.batch(2)))
    assert batch[0].dtype.kind == "U" and batch[0].tolist() == ["ab", "c"]
    assert [str(s) for s in ds.map(lambda s, i: s.upper()).as_numpy_iterator()] == ["AB", "C"]
    assert sorted(_plain(x) for x in ds.batch(1).unbatch().shuffle(2, seed=3)) == [["ab", 1], ["c", 2]]


def test_zip_forms_and_cardinality():
    a, b = Dataset.range(3), Dataset.range(10, 20)
    assert _plain(list(Dataset.zip((a, b)))) == _plain(list(Dataset.zip(a, b))) == [[0, 10], [1, 11], [2, 12]]
    assert Dataset.zip(a, b).cardinality() == 3
    assert Dataset.zip(a, b.repeat()).cardinality() == 3
    assert _plain(next(iter(Dataset.zip({"x": a, "y": (b,)})))) == {"x": 0, "y": [10]}
    with pytest.raises(TypeError, match="Dataset"):
        Dataset.zip((a, [1, 2]))


def test_padded_batch_shapes_values_and_errors():
    ds = Dataset.from_generator(lambda: iter([([1], "x"), ([2, 2, 2], "yy")]),
                                output_signature=(TensorSpec((None,), torch.int64), TensorSpec((), STRING)))
    ints, strs = next(iter(ds.padded_batch(2, padded_shapes=([5], []), padding_values=(-1, ""))))
    assert ints.tolist() == [[1, -1, -1, -1, -1], [2, 2, 2, -1, -1]] and strs.tolist() == ["x", "yy"]
    assert len(list(Dataset.range(5).map(lambda n: torch.zeros(int(n))).padded_batch(2, drop_remainder=True))) == 2
    with pytest.raises(ValueError, match="does not fit"):
        list(ds.padded_batch(2, padded_shapes=([2], [])))


def test_from_generator_types_and_errors():
    ds = Dataset.from_generator(lambda n: iter(range(n)), output_types="float32", args=(3,))
    assert [v.dtype for v in ds] == [torch.float32] * 3
    with pytest.raises(TypeError, match="unknown output type"):
        Dataset.from_generator(lambda: iter([1]), output_types="nonsense")
    with pytest.raises(TypeError, match="not both"):
        Dataset.from_generator(lambda: iter([1]), output_types=torch.int64,
                               output_signature=TensorSpec((), torch.int64))


def test_text_lines_gzip_and_missing_files(tmp_path):
    path = tmp_path / "a.txt.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("one\r\ntwo\n\nthree")
    assert [str(s) for s in TextLineDataset(str(path), compression_type="GZIP")] == ["one", "two", "", "three"]
    with pytest.raises(FileNotFoundError, match="no files match"):
        Dataset.list_files(str(tmp_path / "nothing-*.txt"))
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        list(TextLineDataset(str(tmp_path / "missing.txt")))


def test_interleave_function_must_return_a_dataset():
    with pytest.raises(TypeError, match="must return a distrib.data.Dataset"):
        list(Dataset.range(2).interleave(lambda x: [x], cycle_length=1))
