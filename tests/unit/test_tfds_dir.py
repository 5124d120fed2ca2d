"""`distrib.datasets.load_tfds_dir` against what TensorFlow Datasets yields from the same directory.

The directory was prepared by TFDS itself (`tests/tf_reference/generate_tfds_dir.py`: PNG and JPEG
Image, ClassLabel, Tensor, Scalar and Text features, 2 splits of 3 shards), and TFDS's
``builder.as_dataset(split, shuffle_files=False)`` elements are stored beside it.
"""
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from distrib.data.distribution.sharding import shard
from distrib.datasets import TfdsDirError, load_tfds_dir

DATA = Path(__file__).resolve().parents[1] / "data" / "tf_reference"
TF = json.loads((DATA / "tfds_tiny.json").read_text())
DIRECTORY = DATA / TF["directory"]
_TORCH = {"uint8": torch.uint8, "int64": torch.int64, "int32": torch.int32, "float32": torch.float32,
          "bool": torch.bool}


def check(ours, theirs, key=""):
    """``ours`` (distrib's element) equals TFDS's stored element ``theirs``."""
    if isinstance(theirs, list):   # a supervised pair
        assert isinstance(ours, tuple) and len(ours) == len(theirs)
        for i, (o, t) in enumerate(zip(ours, theirs)):
            check(o, t, f"{key}[{i}]")
        return
    if "dtype" not in theirs:
        assert isinstance(ours, dict) and sorted(ours) == sorted(theirs), key
        for k in theirs:
            check(ours[k], theirs[k], k)
        return
    if theirs["dtype"] == "string":
        assert isinstance(ours, str) and ours == theirs["value"][0], key
        return
    assert isinstance(ours, torch.Tensor) and ours.dtype == _TORCH[theirs["dtype"]], (key, ours)
    assert list(ours.shape) == theirs["shape"], key
    expected = torch.tensor(theirs["value"], dtype=ours.dtype).reshape(theirs["shape"])
    assert torch.equal(ours, expected), key


@pytest.mark.parametrize("split", sorted(TF["splits"]))
def test_elements_are_what_tfds_yields(split):
    ours = list(load_tfds_dir(str(DIRECTORY), split))
    theirs = TF["splits"][split]
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        check(o, t)


@pytest.mark.parametrize("split", sorted(TF["supervised"]))
def test_as_supervised_pairs_the_supervised_keys(split):
    ours = list(load_tfds_dir(str(DIRECTORY), split, as_supervised=True))
    theirs = TF["supervised"][split]
    assert len(ours) == len(theirs) > 0
    for o, t in zip(ours, theirs):
        check(o, t)


def test_png_and_jpeg_pixels_are_tfds_own():
    """TF decodes a colour JPEG with subsampled chroma by libjpeg's fast IDCT with fancy upsampling, as
    distrib.io.decode_jpeg does (simplejpeg): on these photos of uniform noise, the worst case for a
    different IDCT, every pixel is TFDS's."""
    ours = list(load_tfds_dir(str(DIRECTORY), "train"))
    assert len(ours) == len(TF["splits"]["train"]) > 0
    for o, t in zip(ours, TF["splits"]["train"]):
        assert torch.equal(o["photo"], torch.tensor(t["photo"]["value"], dtype=torch.uint8).reshape(t["photo"]["shape"]))


def test_the_shards_are_a_file_source_each_worker_reads_its_own():
    ds = load_tfds_dir(str(DIRECTORY), "train")
    parts = [shard(ds, 2, w) for w in range(2)]
    assert all(kind.name == "FILE" for _, kind in parts)
    captions = [[e["caption"] for e in part] for part, _ in parts]
    tf_captions = [e["caption"]["value"][0] for e in TF["splits"]["train"]]
    lengths = [8, 7, 8]   # dataset_info.json's shard lengths: worker 0 reads shards 0 and 2
    assert captions[0] == tf_captions[:8] + tf_captions[15:] and captions[1] == tf_captions[8:15]
    assert sum(lengths) == len(tf_captions)


def test_iterator_state_resumes_inside_a_sliced_shard():
    ds = load_tfds_dir(str(DIRECTORY), "train[3:-2]").map(lambda e: e["caption"])
    full = list(ds)
    it = iter(ds)
    [next(it) for _ in range(9)]
    again = iter(ds)
    again.load_state_dict(json.loads(json.dumps(it.state_dict())))
    assert list(again) == full[9:]


@pytest.fixture
def copy(tmp_path):
    target = tmp_path / "tiny"
    shutil.copytree(DIRECTORY, target)
    return target


def _edit(path, fn):
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("change, culprit, message", [
    (lambda d: d["splits"][0].update(filepathTemplate="../../{SPLIT}-{SHARD_X_OF_Y}"), "dataset_info.json",
     "not a plain file name inside the directory"),
    (lambda d: d["splits"][0].update(filepathTemplate="/etc/{SPLIT}"), "dataset_info.json", "not a plain file name"),
    (lambda d: d.update(name="../evil"), "dataset_info.json", "is not a plain name"),
    (lambda d: d["splits"][0].update(shardLengths=["8", "x", "8"]), "dataset_info.json", "not an integer"),
    (lambda d: d["splits"][0].update(shardLengths=["8", str(1 << 60), "8"]), "dataset_info.json", "out of range"),
    (lambda d: d.update(supervisedKeys={"tuple": {"items": [{"featureKey": "nope"}, {"featureKey": "label"}]}}),
     "dataset_info.json", "not top-level features"),
    (lambda d: d.update(fileFormat="array_record"), "dataset_info.json", "only TFRecord shards"),
])
def test_bad_dataset_info_is_one_error_naming_the_file(copy, change, culprit, message):
    _edit(copy / "dataset_info.json", change)
    with pytest.raises(TfdsDirError, match=message) as info:
        load_tfds_dir(str(copy), "train")
    assert str(copy / culprit) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("content, message", [
    (os.urandom(200), "not valid JSON"),
    (b"[1, 2]", "not a FeaturesDict"),
    (json.dumps({"featuresDict": {"features": {"v": {"video": {}}}}}).encode(), "feature 'v' is a"),
    (json.dumps({"featuresDict": {"features": {"t": {"tensor": {"dtype": "int64", "shape": {
        "dimensions": ["2", "-1"]}}}}}}).encode(), "unknown dimension after the first"),
    (json.dumps({"featuresDict": {"features": {"t": {"tensor": {"dtype": "object"}}}}}).encode(),
     "is not one distrib reads"),
])
def test_bad_features_json_is_one_error_naming_the_file(copy, content, message):
    (copy / "features.json").write_bytes(content)
    with pytest.raises(TfdsDirError, match=message) as info:
        load_tfds_dir(str(copy), "train")
    assert str(copy / "features.json") in str(info.value)


def test_a_missing_shard_or_metadata_file_is_named(copy):
    os.unlink(copy / "tiny_shapes-test.tfrecord-00001-of-00003")
    with pytest.raises(TfdsDirError, match="tiny_shapes-test.tfrecord-00001-of-00003: a shard"):
        load_tfds_dir(str(copy), "test")
    assert len(list(load_tfds_dir(str(copy), "train"))) == 23
    os.unlink(copy / "features.json")
    with pytest.raises(TfdsDirError, match="features.json: missing"):
        load_tfds_dir(str(copy), "train")


@pytest.mark.parametrize("split, message", [("validation", "not in"), ("train[::2]", "is not NAME"),
                                            ("train[:200%]", "percent")])
def test_bad_split_expressions_are_refused(split, message):
    with pytest.raises(ValueError, match=message):
        load_tfds_dir(str(DIRECTORY), split)
