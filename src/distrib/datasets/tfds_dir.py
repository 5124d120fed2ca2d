"""`load_tfds_dir`: a TFDS-prepared dataset directory read as a `distrib.data.Dataset`, without TensorFlow.

TFDS's ``download_and_prepare`` leaves ``<data_dir>/<name>/<version>/`` with
``dataset_info.json``, ``features.json`` and TFRecord shards of
``tf.train.Example`` s. This reads those shards with
`distrib.data.TFRecordDataset`'s file reader and decodes each Example as
TFDS does: images (PNG/JPEG bytes) to HWC ``uint8`` tensors, ClassLabel to
int64, Tensor/Scalar to their dtype and shape, Text to ``str``, nested
FeaturesDicts to nested dicts — the elements of ``builder.as_dataset(split,
shuffle_files=False)``, in its order. The shards are a file source, so
``AutoShardPolicy.FILE``/``AUTO`` gives each worker its own shards.

Example:
    >>> ds = load_tfds_dir("~/tensorflow_datasets/mnist/3.0.1", "train[:10%]", as_supervised=True)
    >>> image, label = next(iter(ds))      # uint8 [28, 28, 1], int64 scalar
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

import numpy as np
import torch

from distrib.data.dataset import Dataset
from distrib.data.readers.tfrecord import TFRecordFileDataset
from distrib.datasets.tfds_info import FeatureInfo, TfdsDirError, TfdsInfo, file_instructions, read_info
from distrib.io import STRING, FixedLenFeature, FixedLenSequenceFeature, decode_image, parse_single_example

__all__ = ["load_tfds_dir", "TfdsDirError"]

_TORCH = {"bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
          "uint16": torch.uint16, "int32": torch.int32, "uint32": torch.uint32, "int64": torch.int64,
          "uint64": torch.uint64, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float32": torch.float32, "float64": torch.float64}


def load_tfds_dir(path: str, split: str, *, as_supervised: bool = False) -> Dataset:
    """The examples of ``split`` in the TFDS-prepared directory ``path``, decoded as TFDS decodes them.

    Args:
        path: the version directory TFDS prepared (``<data_dir>/<name>/<version>``,
            the one holding ``dataset_info.json``).
        split: a split name, a slice (``"train[:10%]"``, ``"train[100:-50]"``) or a
            sum of them (``"train+test"``); percents round as TFDS rounds them.
        as_supervised: yield ``(input, target)`` tuples of the directory's
            ``supervisedKeys`` instead of dicts, as ``tfds.load(..., as_supervised=True)``.

    Returns:
        A `Dataset` of dicts (or pairs): the order of ``builder.as_dataset(split,
        shuffle_files=False)``; shuffle it yourself (or ``list_files``-style, by shard).

    Raises:
        TfdsDirError: metadata that is missing, garbage, names files outside the
            directory, or features distrib does not decode (one line naming the file).
        ValueError: an unknown split or a malformed split expression.
    """
    info = read_info(os.path.expanduser(os.fspath(path)))
    if as_supervised and info.supervised_keys is None:
        raise TfdsDirError(f"{os.path.join(info.directory, 'dataset_info.json')}: no supervisedKeys, "
                           "so as_supervised=True has nothing to pair")
    reads = file_instructions(info, split)
    for shard, _, _ in reads:
        if not os.path.isfile(shard):
            raise TfdsDirError(f"{shard}: a shard dataset_info.json lists is missing")
    decode = ExampleDecoder(info, as_supervised)
    if not reads:
        return Dataset.range(0).map(decode)
    keys: List[str] = []
    plan: Dict[str, Tuple[str, int, int]] = {}
    for shard, skip, take in reads:
        key = shard if shard not in plan else f"{shard}#{len(keys)}"   # a shard read twice (train[:2]+train)
        keys.append(key)
        plan[key] = (shard, skip, take)
    return Dataset.from_files(keys, _ShardReader(plan)).map(decode)


class _ShardReader:
    """``from_files``' reader: one shard's records, ``skip`` then ``take``."""

    def __init__(self, plan: Dict[str, Tuple[str, int, int]]) -> None:
        self._plan = plan

    def __call__(self, key: str) -> Dataset:
        shard, skip, take = self._plan[str(key)]
        return TFRecordFileDataset(shard).skip(skip).take(take)


class ExampleDecoder:
    """One serialized ``tf.train.Example`` to the element TFDS yields for it."""

    def __init__(self, info: TfdsInfo, as_supervised: bool) -> None:
        self._info = info
        self._supervised = info.supervised_keys if as_supervised else None
        self._spec = {f.key: _parse_spec(f) for f in info.features}

    def __call__(self, record: Any) -> Any:
        parsed = parse_single_example(record, self._spec)
        values = {f.key: _decode(f, parsed[f.key]) for f in self._info.features}
        element = _nest(self._info.nesting, values)
        if self._supervised is not None:
            return element[self._supervised[0]], element[self._supervised[1]]
        return element


def _parse_spec(feature: FeatureInfo) -> Any:
    if feature.kind in ("image", "text"):
        return FixedLenFeature([], STRING)
    if feature.kind == "class_label":
        return FixedLenFeature([], torch.int64)
    dtype = STRING if feature.dtype == "string" else torch.float32 if "float" in feature.dtype else torch.int64
    if feature.shape and feature.shape[0] == -1:
        return FixedLenSequenceFeature(list(feature.shape[1:]), dtype, allow_missing=True)
    return FixedLenFeature(list(feature.shape), dtype)


def _decode(feature: FeatureInfo, value: Any) -> Any:
    if feature.kind == "image":
        image = decode_image(value, channels=feature.shape[-1], expand_animations=False)
        if any(want not in (-1, got) for want, got in zip(feature.shape, image.shape)):
            raise ValueError(f"image feature {feature.key!r} decoded to shape {list(image.shape)}, "
                             f"features.json says {list(feature.shape)}")
        return image
    if feature.kind == "text":
        return value.decode("utf-8") if isinstance(value, (bytes, np.bytes_)) else str(value)
    if feature.kind == "class_label":
        return value
    if feature.dtype == "string":
        flat = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in np.asarray(value).reshape(-1)]
        return np.asarray(flat, dtype=str).reshape(np.shape(value)) if np.ndim(value) else flat[0]
    return value.to(_TORCH[feature.dtype])


def _nest(nesting: Dict[str, Any], values: Dict[str, Any]) -> Dict[str, Any]:
    return {name: _nest(sub, values) if isinstance(sub, dict) else values[sub] for name, sub in nesting.items()}
