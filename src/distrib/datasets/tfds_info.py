"""What a TFDS-prepared directory says about itself: splits, shards, features, supervised keys.

Reads ``dataset_info.json`` and ``features.json`` (TFDS 4's JSON forms of its
``DatasetInfo`` and ``FeaturesDict`` protos) as untrusted input: every shard
name is a plain file name inside the directory, every number an int within
bounds, every feature a kind distrib decodes; anything else is one
`TfdsDirError` naming the file. `file_instructions` turns a split expression
(``"train"``, ``"train[:10%]"``, ``"train[3:-2]+test"``) into per-shard
``(path, skip, take)`` reads, with TFDS's rounding for percents.

Example:
    >>> info = read_info("/data/mnist/3.0.1")
    >>> [(os.path.basename(p), s, t) for p, s, t in file_instructions(info, "train[:10%]")]
    [('mnist-train.tfrecord-00000-of-00001', 0, 6000)]
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from distrib.errors import DistribError

__all__ = ["TfdsDirError", "FeatureInfo", "SplitInfo", "TfdsInfo", "read_info", "file_instructions"]

_MAX_JSON = 16 << 20
_MAX_EXAMPLES = 1 << 48
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_SLICE = re.compile(r"^([A-Za-z0-9_\-]+)(?:\[(-?\d+%?)?:(-?\d+%?)?\])?$")
_TENSOR_DTYPES = {"bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "int64", "uint64",
                  "float16", "bfloat16", "float32", "float64", "string"}


class TfdsDirError(DistribError, ValueError):
    """A TFDS directory whose metadata cannot be used (the message names the file)."""


@dataclass(frozen=True)
class FeatureInfo:
    """One leaf feature: its Example key (``"a/b"`` inside nested dicts), kind, dtype and shape."""

    key: str
    kind: str           # "image", "class_label", "tensor", "text"
    dtype: str
    shape: Tuple[int, ...]   # -1 for an unknown dimension
    encoding: str = "png"    # images: "png" or "jpeg" (or "" for either)


@dataclass(frozen=True)
class SplitInfo:
    name: str
    shards: Tuple[str, ...]        # absolute paths
    lengths: Tuple[int, ...]

    @property
    def num_examples(self) -> int:
        return sum(self.lengths)


@dataclass(frozen=True)
class TfdsInfo:
    directory: str
    name: str
    splits: Dict[str, SplitInfo]
    features: Tuple[FeatureInfo, ...]
    supervised_keys: Optional[Tuple[str, str]] = None
    nesting: Dict[str, Any] = field(default_factory=dict)


def _load_json(path: str) -> Any:
    try:
        if os.path.getsize(path) > _MAX_JSON:
            raise TfdsDirError(f"{path}: larger than {_MAX_JSON} bytes, not TFDS metadata")
        with open(path, "rb") as handle:
            return json.loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        raise TfdsDirError(f"{path}: missing; is this a TFDS-prepared directory (<data_dir>/<name>/<version>)?") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise TfdsDirError(f"{path}: not valid JSON ({type(exc).__name__}: {str(exc)[:80]})") from None


def _int(value: Any, path: str, what: str) -> int:
    try:
        number = int(value)  # protobuf's JSON writes int64 as strings
    except (TypeError, ValueError):
        raise TfdsDirError(f"{path}: {what} is {str(value)[:40]!r}, not an integer") from None
    if isinstance(value, bool) or not -_MAX_EXAMPLES < number < _MAX_EXAMPLES:
        raise TfdsDirError(f"{path}: {what} {str(value)[:40]!r} is out of range")
    return number


def _shard_names(template: str, dataset: str, split: str, file_format: str, count: int, path: str) -> List[str]:
    names = []
    for i in range(count):
        name = (template.replace("{DATASET}", dataset).replace("{SPLIT}", split)
                .replace("{FILEFORMAT}", file_format)
                .replace("{SHARD_X_OF_Y}", f"{i:05d}-of-{count:05d}").replace("{SHARD_INDEX}", f"{i:05d}"))
        if not _NAME.match(name) or name in (".", ".."):
            raise TfdsDirError(f"{path}: split {split!r} names shard {name[:80]!r}, not a plain file name "
                               "inside the directory")
        names.append(name)
    return names


def _splits(info: Any, directory: str, path: str) -> Dict[str, SplitInfo]:
    name = info.get("name")
    file_format = info.get("fileFormat", "tfrecord")
    if not isinstance(name, str) or not _NAME.match(name):
        raise TfdsDirError(f"{path}: dataset name {str(name)[:40]!r} is not a plain name")
    if file_format != "tfrecord":
        raise TfdsDirError(f"{path}: file format {str(file_format)[:40]!r}; only TFRecord shards are read")
    splits: Dict[str, SplitInfo] = {}
    entries = info.get("splits")
    if not isinstance(entries, list) or not entries:
        raise TfdsDirError(f"{path}: no splits listed")
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not _NAME.match(entry["name"]):
            raise TfdsDirError(f"{path}: a split entry has no plain name: {str(entry)[:80]}")
        lengths = entry.get("shardLengths", [])
        if not isinstance(lengths, list) or len(lengths) > 100000:
            raise TfdsDirError(f"{path}: split {entry['name']!r} has no list of shard lengths")
        counts = tuple(_int(v, path, f"a shard length of split {entry['name']!r}") for v in lengths)
        if any(c < 0 for c in counts):
            raise TfdsDirError(f"{path}: split {entry['name']!r} has a negative shard length")
        template = entry.get("filepathTemplate", "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}")
        if not isinstance(template, str):
            raise TfdsDirError(f"{path}: split {entry['name']!r} has a filepathTemplate that is not text")
        names = _shard_names(template, name, entry["name"], file_format, len(counts), path)
        splits[entry["name"]] = SplitInfo(entry["name"], tuple(os.path.join(directory, n) for n in names), counts)
    return splits


def _supervised(info: Any, path: str) -> Optional[Tuple[str, str]]:
    keys = info.get("supervisedKeys")
    if keys is None:
        return None
    try:
        if "tuple" in keys:
            items = [item["featureKey"] for item in keys["tuple"]["items"]]
        else:
            items = [keys["input"], keys["output"]]
        if len(items) != 2 or not all(isinstance(k, str) for k in items):
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise TfdsDirError(f"{path}: supervisedKeys {str(keys)[:80]} is not a pair of feature names") from None
    return items[0], items[1]


def _shape(spec: Any, path: str, key: str) -> Tuple[int, ...]:
    dims = spec.get("dimensions", []) if isinstance(spec, dict) else None
    if not isinstance(dims, list) or len(dims) > 32:
        raise TfdsDirError(f"{path}: feature {key!r} has no valid shape")
    shape = tuple(_int(d, path, f"a dimension of feature {key!r}") for d in dims)
    if any(d < -1 for d in shape):
        raise TfdsDirError(f"{path}: feature {key!r} has a negative dimension")
    return shape


def _features(spec: Any, prefix: str, path: str, out: List[FeatureInfo]) -> Dict[str, Any]:
    """Flatten a FeaturesDict's JSON into ``out``; returns the nesting (key -> subtree or leaf key)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("featuresDict"), dict):
        raise TfdsDirError(f"{path}: {prefix or 'the top level'} is not a FeaturesDict (TFDS 4's features.json)")
    features = spec["featuresDict"].get("features")
    if not isinstance(features, dict):
        raise TfdsDirError(f"{path}: a FeaturesDict without features")
    nesting: Dict[str, Any] = {}
    for name, feature in features.items():
        key = f"{prefix}/{name}" if prefix else name
        if not isinstance(feature, dict):
            raise TfdsDirError(f"{path}: feature {key!r} is not an object")
        if "featuresDict" in feature:
            nesting[name] = _features(feature, key, path, out)
            continue
        nesting[name] = key
        out.append(_leaf(feature, key, path))
    return nesting


def _leaf(feature: Dict[str, Any], key: str, path: str) -> FeatureInfo:
    if "image" in feature:
        image = feature["image"]
        shape = _shape(image.get("shape"), path, key)
        dtype = image.get("dtype", "uint8")
        if len(shape) != 3 or dtype != "uint8":
            raise TfdsDirError(f"{path}: image feature {key!r} is {dtype} of shape {list(shape)}; "
                               "uint8 images (height, width, channels) are read")
        return FeatureInfo(key, "image", "uint8", shape, str(image.get("encodingFormat", "")))
    if "classLabel" in feature:
        return FeatureInfo(key, "class_label", "int64", ())
    if "text" in feature:
        return FeatureInfo(key, "text", "string", ())
    if "tensor" in feature:
        tensor = feature["tensor"]
        dtype, encoding = tensor.get("dtype"), tensor.get("encoding", "none")
        shape = _shape(tensor.get("shape", {}), path, key)
        if dtype not in _TENSOR_DTYPES or encoding not in ("none", None):
            raise TfdsDirError(f"{path}: tensor feature {key!r} ({str(dtype)[:20]}, encoding "
                               f"{str(encoding)[:20]}) is not one distrib reads (encoding 'none')")
        if -1 in shape[1:]:
            raise TfdsDirError(f"{path}: tensor feature {key!r} has an unknown dimension after the first")
        return FeatureInfo(key, "tensor", dtype, shape)
    kind = str(feature.get("pythonClassName", sorted(feature)))[:80]
    raise TfdsDirError(f"{path}: feature {key!r} is a {kind}; distrib reads Image, ClassLabel, Tensor, "
                       "Scalar, Text and nested FeaturesDict")


def read_info(directory: str) -> TfdsInfo:
    """The metadata of the TFDS-prepared ``directory`` (``<data_dir>/<name>/<version>``)."""
    directory = os.path.abspath(os.fspath(directory))
    info_path = os.path.join(directory, "dataset_info.json")
    info = _load_json(info_path)
    if not isinstance(info, dict):
        raise TfdsDirError(f"{info_path}: not a JSON object")
    features_path = os.path.join(directory, "features.json")
    leaves: List[FeatureInfo] = []
    nesting = _features(_load_json(features_path), "", features_path, leaves)
    supervised = _supervised(info, info_path)
    if supervised and any(k not in nesting for k in supervised):
        raise TfdsDirError(f"{info_path}: supervisedKeys {list(supervised)} are not top-level features")
    return TfdsInfo(directory, info["name"] if isinstance(info.get("name"), str) else "",
                    _splits(info, directory, info_path), tuple(leaves), supervised, nesting)


def _bound(text: Optional[str], n: int, default: int, expression: str) -> int:
    if text is None:
        return default
    if text.endswith("%"):
        value = round(int(text[:-1]) * n / 100)  # TFDS's "closest" rounding (Python's round)
        if not -100 <= int(text[:-1]) <= 100:
            raise ValueError(f"split {expression!r}: a percent must lie in [-100, 100]")
    else:
        value = int(text)
    if value < 0:
        value += n
    return min(max(value, 0), n)


def file_instructions(info: TfdsInfo, split: str) -> List[Tuple[str, int, int]]:
    """``(shard path, records to skip, records to take)`` for each shard that split expression ``split`` reads."""
    out: List[Tuple[str, int, int]] = []
    for part in str(split).replace(" ", "").split("+"):
        match = _SLICE.match(part)
        if not match:
            raise ValueError(f"split {split!r}: {part!r} is not NAME, NAME[a:b] or NAME[a%:b%]")
        name, lo_text, hi_text = match.groups()
        if name not in info.splits:
            raise ValueError(f"split {name!r} is not in {info.directory} (it has {sorted(info.splits)})")
        record = info.splits[name]
        n = record.num_examples
        lo, hi = _bound(lo_text, n, 0, split), _bound(hi_text, n, n, split)
        start = 0
        for path, length in zip(record.shards, record.lengths):
            skip, end = max(lo - start, 0), min(hi - start, length)
            if end > skip:
                out.append((path, skip, end - skip))
            start += length
    return out
