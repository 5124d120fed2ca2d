"""tf.train.Example parsing in distrib.io against TensorFlow 2.21's recorded results.

TF wrote six Examples holding every feature kind (tests/tf_reference/generate_tfrecord_io.py)
and recorded what ``tf.io.parse_single_example`` / ``parse_example`` give for each scenario
of feature specs (dense, sparse, sequence, defaults, missing and empty features) or which
scenarios it rejects; distrib must give the same values, dtypes and shapes, and one error
line naming the feature where TF raises.
"""
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import distrib
from distrib import io as dio

REF_DIR = Path(__file__).resolve().parents[1] / "data" / "tf_reference" / "tfrecord_io"
REF = json.loads((REF_DIR / "tfrecord_io.json").read_text())
RECORDS = [bytes.fromhex(r) for r in REF["records"]]
DTYPES = {"int64": torch.int64, "float32": torch.float32, "string": distrib.data.STRING}


def spec(desc):
    kind, shape, dtype, default = desc
    if kind == "var":
        return dio.VarLenFeature(DTYPES[dtype])
    if kind == "seq":
        return dio.FixedLenSequenceFeature(shape, DTYPES[dtype], allow_missing=True, default_value=default)
    return dio.FixedLenFeature(shape, DTYPES[dtype], default_value=default)


def describe(value):
    """distrib's parsed value in the generator's JSON form."""
    if isinstance(value, dio.SparseTensor):
        assert value.indices.dtype == torch.int64 and value.dense_shape.dtype == torch.int64
        return {"sparse": {"indices": value.indices.tolist(), "values": describe(value.values),
                           "dense_shape": value.dense_shape.tolist()}}
    if isinstance(value, bytes):
        return {"dtype": "string", "shape": [], "values": [value.hex()]}
    if isinstance(value, np.ndarray):
        assert value.dtype == object and all(isinstance(v, bytes) for v in value.reshape(-1).tolist())
        return {"dtype": "string", "shape": list(value.shape), "values": [v.hex() for v in value.reshape(-1).tolist()]}
    assert isinstance(value, torch.Tensor), type(value)
    return {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape),
            "values": value.reshape(-1).tolist()}


def _feature_named(message):
    """The feature TF's error message names."""
    return re.search(r"(?:Key: |Feature: |with key )(\w+)", message).group(1)


def _check(scenario, want, call):
    specs = {k: spec(d) for k, d in REF["scenarios"][scenario].items()}
    if "error" in want:
        with pytest.raises(ValueError) as info:
            call(specs)
        line = str(info.value)
        assert "\n" not in line
        assert repr(_feature_named(want["message"])) in line, (line, want["message"])
        return
    got = {k: describe(v) for k, v in call(specs).items()}
    assert got == want, scenario


@pytest.mark.parametrize("scenario", sorted(REF["parse"]))
def test_parse_single_example_gives_tf_values_or_tf_errors(scenario):
    for i, (record, want) in enumerate(zip(RECORDS, REF["parse"][scenario]["single"])):
        _check(scenario, want, lambda specs: dio.parse_single_example(record, specs))


@pytest.mark.parametrize("scenario", sorted(REF["parse"]))
def test_parse_example_on_a_batch_gives_tf_values_or_tf_errors(scenario):
    want = REF["parse"][scenario]["batch"]
    _check(scenario, want, lambda specs: dio.parse_example(RECORDS, specs))
    batch = np.empty(len(RECORDS), dtype=object)  # what TFRecordDataset(...).batch(n) yields
    batch[:] = RECORDS
    _check(scenario, want, lambda specs: dio.parse_example(batch, specs))


def test_the_reference_covers_dense_sparse_sequence_defaults_and_errors():
    parse = REF["parse"]
    assert "sparse" in json.dumps(parse["sparse"]["batch"])
    assert parse["sequence"]["batch"]["seq"]["shape"][0] == 6 and len(parse["sequence"]["batch"]["seq"]["shape"]) == 3
    assert {k for k, v in parse.items() if "error" in v["batch"]} >= {"missing_required", "wrong_count", "wrong_type"}


def test_examples_built_with_distrib_equal_tf_serialized_examples():
    sys_path = Path(__file__).resolve().parents[1] / "tf_reference"
    import sys

    sys.path.insert(0, str(sys_path))
    from generate_tfrecord_io import example_features

    for i, record in enumerate(RECORDS):
        feature = {}
        for key, (kind, values) in example_features(i).items():
            if kind == "int64":
                feature[key] = dio.Feature(int64_list=dio.Int64List(value=values))
            elif kind == "float":
                feature[key] = dio.Feature(float_list=dio.FloatList(value=values))
            elif kind == "bytes":
                feature[key] = dio.Feature(bytes_list=dio.BytesList(value=values))
            else:
                feature[key] = dio.Feature()
        mine = dio.Example(features=dio.Features(feature=feature))
        assert dio.Example.FromString(record) == mine
        assert dio.Example.FromString(mine.SerializeToString()) == dio.Example.FromString(record)


def test_train_aliases_are_the_io_builders():
    assert distrib.train.Example is dio.Example and distrib.train.Feature is dio.Feature
    assert distrib.train.BytesList is dio.BytesList and distrib.train.Features is dio.Features


def test_bad_specs_and_inputs_are_one_line_errors_naming_the_culprit():
    with pytest.raises(ValueError, match="'x'.*torch.float32, torch.int64 or distrib.data.STRING"):
        dio.parse_single_example(RECORDS[0], {"x": dio.FixedLenFeature([], torch.float64)})
    with pytest.raises(ValueError, match="'seq'.*allow_missing=True"):
        dio.parse_single_example(RECORDS[0], {"seq": dio.FixedLenSequenceFeature([2], torch.float32)})
    with pytest.raises(ValueError, match="example 0: the bytes are not a serialized tf.train.Example"):
        dio.parse_single_example(b"\xff\xff\xff garbage", {"id": dio.FixedLenFeature([], torch.int64)})
    with pytest.raises(TypeError, match="keep records as bytes"):
        dio.parse_single_example("text", {"id": dio.FixedLenFeature([], torch.int64)})
    with pytest.raises(ValueError, match="'vec': default_value has 2 values but shape \\[3\\] needs 3"):
        dio.parse_single_example(RECORDS[0], {"vec": dio.FixedLenFeature([3], torch.float32, default_value=[1, 2])})
    with pytest.raises(ValueError, match="1-D batch"):
        dio.parse_example(RECORDS[0], {"id": dio.FixedLenFeature([], torch.int64)})


def test_sparse_to_dense_fills_missing_entries():
    out = dio.parse_example(RECORDS, {"tags": dio.VarLenFeature(distrib.data.STRING),
                                      "ids": dio.VarLenFeature(torch.int64)})
    tags = out["tags"].to_dense()
    assert tags.shape == (6, 3) and tags[3].tolist() == [b"t0", b"t1", b"t2"] and tags[0].tolist() == [b""] * 3
    ids = out["ids"].to_dense(default_value=-1)
    assert ids[4].tolist() == [400, 401, 402, 403] and ids[1].tolist() == [-1] * 4


def _float_example(values, unpacked=False):
    """An Example with float feature "x"; ``unpacked`` writes each float as its own field (valid proto)."""
    if not unpacked:
        return dio.Example(features=dio.Features(feature={
            "x": dio.Feature(float_list=dio.FloatList(value=values))})).SerializeToString()

    def field(number, payload):  # a length-delimited field
        length = len(payload)
        return bytes([number << 3 | 2]) + (bytes([length]) if length < 128 else bytes([length & 127 | 128, length >> 7])) + payload

    floats = b"".join(b"\x0d" + np.float32(v).tobytes() for v in values)  # tag 1, wire type 5
    entry = field(1, b"x") + field(2, field(2, floats))
    return field(1, field(1, entry))


def test_batched_float_features_keep_every_bit_and_read_unpacked_encodings():
    special = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-45, 3.4e38, -1.5]
    records = [_float_example(special), _float_example(special[::-1], unpacked=True), _float_example(special)]
    got = dio.parse_example(records, {"x": dio.FixedLenFeature([2, 4], torch.float32)})["x"]
    want = np.array([special, special[::-1], special], dtype=np.float32).reshape(3, 2, 4)
    assert got.dtype == torch.float32 and got.shape == (3, 2, 4)
    assert got.numpy().tobytes() == want.tobytes()  # -0.0 and NaN bit patterns included
    one = [dio.parse_single_example(r, {"x": dio.FixedLenFeature([2, 4], torch.float32)})["x"] for r in records]
    assert torch.stack(one).numpy().tobytes() == want.tobytes()


@pytest.mark.parametrize("kind", ["float", "int64"])
def test_a_batch_with_one_wrong_count_or_kind_names_that_example(kind):
    def build(n, as_kind=kind):
        value = (dio.Feature(float_list=dio.FloatList(value=[1.0] * n)) if as_kind == "float"
                 else dio.Feature(int64_list=dio.Int64List(value=[1] * n)))
        return dio.Example(features=dio.Features(feature={"x": value})).SerializeToString()

    dtype = torch.float32 if kind == "float" else torch.int64
    spec = {"x": dio.FixedLenFeature([8], dtype)}
    good = [build(8)] * 5
    assert dio.parse_example(good, spec)["x"].shape == (5, 8)
    for bad, message in [(build(7), "example 3 has 7"), (build(9), "example 3 has 9"),
                         (build(8, "int64" if kind == "float" else "float"), "example 3 holds"),
                         (dio.Example().SerializeToString(), "example 3 does not have it")]:
        records = good[:3] + [bad] + good[:1]
        with pytest.raises(ValueError, match=message):
            dio.parse_example(records, spec)
    compensating = good[:2] + [build(7), build(9)]  # same total size, different counts
    with pytest.raises(ValueError, match="example 2 has 7"):
        dio.parse_example(compensating, spec)
    with_default = {"x": dio.FixedLenFeature([8], dtype, default_value=[2] * 8)}
    parsed = dio.parse_example(good[:1] + [dio.Example().SerializeToString()], with_default)["x"]
    assert parsed[0].tolist() == [1] * 8 and parsed[1].tolist() == [2] * 8
