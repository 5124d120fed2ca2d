"""Prepare a tiny TFDS dataset directory with TensorFlow Datasets and record what TFDS yields from it.

Run with the TensorFlow virtual environment (never distrib's):

    /work/tfvenv/bin/python tests/tf_reference/generate_tfds_dir.py

It writes ``tests/data/tf_reference/tfds_tiny/tiny_shapes/1.0.0/`` (TFDS's own
``download_and_prepare`` output: dataset_info.json, features.json and
TFRecord shards of two splits, PNG and JPEG images, a ClassLabel, a Tensor, a
Text and a Scalar feature) and ``tests/data/tf_reference/tfds_tiny.json``:
for each split expression, the elements ``builder.as_dataset(split,
shuffle_files=False)`` yields, in order (and with ``as_supervised=True``).
"""
import json
import shutil
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "tf_reference"
ROOT = DATA / "tfds_tiny"
SPLITS = ["train", "test", "train[:10%]", "train[25%:75%]", "train[3:-2]", "test[-3:]", "train[:4]+test[:2]"]


class TinyShapes(tfds.core.GeneratorBasedBuilder):
    """Small images of coloured squares, with a label, a vector, a caption and a count."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(6, 5, 3)),
                "photo": tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg"),
                "mask": tfds.features.Image(shape=(6, 5, 1)),
                "label": tfds.features.ClassLabel(names=["red", "green", "blue"]),
                "vec": tfds.features.Tensor(shape=(3,), dtype=np.float32),
                "grid": tfds.features.Tensor(shape=(2, 2), dtype=np.int64),
                "caption": tfds.features.Text(),
                "count": tfds.features.Scalar(dtype=np.int32),
                "flag": tfds.features.Scalar(dtype=np.bool_),
            }),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0, 23), "test": self._generate_examples(100, 9)}

    def _generate_examples(self, start, count):
        rng = np.random.default_rng(start + 7)
        for i in range(start, start + count):
            h, w = 4 + i % 3, 5 + i % 2
            yield f"ex{i}", {
                "image": rng.integers(0, 256, (6, 5, 3), dtype=np.uint8),
                "photo": rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
                "mask": rng.integers(0, 2, (6, 5, 1), dtype=np.uint8) * 255,
                "label": i % 3,
                "vec": rng.standard_normal(3).astype(np.float32),
                "grid": np.arange(4, dtype=np.int64).reshape(2, 2) + i,
                "caption": f"square number {i} \u00e9",
                "count": np.int32(i * 3 - 50),
                "flag": bool(i % 2),
            }


def encode(value):
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [encode(v) for v in value]
    arr = np.asarray(value)
    if arr.dtype.kind in "SO":
        return {"dtype": "string", "shape": list(arr.shape),
                "value": [b.decode("utf-8") for b in arr.reshape(-1).tolist()]}
    return {"dtype": arr.dtype.name, "shape": list(arr.shape), "value": arr.reshape(-1).tolist()}


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    builder = TinyShapes(data_dir=str(ROOT))
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=3))
    out = {"directory": str(Path(builder.data_dir).relative_to(DATA)), "splits": {}, "supervised": {}}
    for split in SPLITS:
        out["splits"][split] = [encode(tfds.as_numpy(e)) for e in builder.as_dataset(split, shuffle_files=False)]
    for split in ["train", "test[:3]"]:
        out["supervised"][split] = [encode(tuple(tfds.as_numpy(e))) for e in
                                    builder.as_dataset(split, shuffle_files=False, as_supervised=True)]
    (DATA / "tfds_tiny.json").write_text(json.dumps(out, indent=None, sort_keys=True) + "\n")
    for path in sorted(Path(builder.data_dir).iterdir()):
        print(path.name, path.stat().st_size)


if __name__ == "__main__":
    main()
