"""Record what TensorFlow 2.21 writes and reads for TFRecord files, Example protos and images.

Run with a TensorFlow virtual environment (never distrib's):

    /work/tfvenv/bin/python tests/tf_reference/generate_tfrecord_io.py

It writes into ``tests/data/tf_reference/tfrecord_io/``:

* ``examples.tfrecord`` / ``.gz`` / ``.zz``: the same tf.train.Examples (every
  feature kind) written by ``tf.io.TFRecordWriter`` plain, GZIP and ZLIB;
* ``*.jpg`` / ``*.png``: images encoded by ``tf.io.encode_jpeg`` / ``encode_png``;
* ``tfrecord_io.json``: the records' bytes (hex), what ``parse_single_example``
  and ``parse_example`` give for each scenario of ``PARSE_SCENARIOS`` (or the
  error TF raises), what TF reads from damaged copies, and what TF reads from
  the files distrib wrote (``written_by_distrib.*``, when present);
* ``pixels.npz``: the source pixels and TF's decodings of the image files;
* ``parts/part-<i>.tfrecord``: small files whose read order TF records with and
  without ``num_parallel_reads``.

``written_by_distrib.tfrecord{,.gz,.zz}`` are written by distrib's
``TFRecordWriter`` (from the records of ``tfrecord_io.json``, before this script
runs; any records do: the tests compare TF's reading of each stored file with
distrib's reading of the same file). TF serializes an Example's feature map in no
fixed order, so a new run stores different (equally valid) record bytes.
"""
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "tf_reference" / "tfrecord_io"
sys.path.insert(0, str(HERE))

from generate import _tf  # noqa: E402

#: name -> {feature key: spec description}; a spec is [kind, shape, dtype, default] (kind: fixed, var, seq).
PARSE_SCENARIOS = {
    "dense": {"id": ["fixed", [], "int64", None], "label": ["fixed", [1], "int64", None],
              "score": ["fixed", [], "float32", None], "vec": ["fixed", [3], "float32", None],
              "mat": ["fixed", [2, 3], "int64", None], "name": ["fixed", [], "string", None],
              "blob": ["fixed", [], "string", None], "pair": ["fixed", [2], "string", None]},
    "sparse": {"tags": ["var", None, "string", None], "ids": ["var", None, "int64", None],
               "weights": ["var", None, "float32", None]},
    "sequence": {"seq": ["seq", [2], "float32", None], "ids": ["seq", [], "int64", None],
                 "tags": ["seq", [], "string", None]},
    "sequence_padded": {"seq": ["seq", [2], "float32", -1.0], "ids": ["seq", [], "int64", 9]},
    "defaults": {"opt": ["fixed", [], "float32", 7.5], "absent": ["fixed", [2], "string", ["a", "b"]],
                 "absent_mat": ["fixed", [2, 2], "int64", [[1, 2], [3, 4]]]},
    "empty_kind_var": {"empty": ["var", None, "float32", None]},
    "empty_kind_fixed_default": {"empty": ["fixed", [], "float32", 1.0]},
    "missing_required": {"opt": ["fixed", [], "float32", None]},
    "wrong_count": {"vec": ["fixed", [2], "float32", None]},
    "wrong_type": {"id": ["fixed", [], "float32", None]},
    "wrong_type_var": {"tags": ["var", None, "int64", None]},
    "seq_not_multiple": {"vec": ["seq", [2], "float32", None]},
}

#: name -> (what to do to examples.tfrecord's bytes): flip a byte, truncate, forge a length, garbage.
DAMAGE = {"flip_data_byte": ["flip", 20], "flip_length_byte": ["flip", 2], "truncate_inside_data": ["cut", -7],
          "truncate_inside_header": ["keep_first_plus", 5], "long_length": ["long_length", 1 << 20],
          "garbage": ["garbage", 64]}


def example_features(i):
    """The features of example ``i`` (plain Python values; the generator and the tests share this)."""
    f = {"id": ("int64", [i]), "label": ("int64", [i % 3]), "score": ("float", [0.5 + i / 3.0]),
         "vec": ("float", [i, -1.25, 1e-3 * i]), "mat": ("int64", list(range(i, i + 6))),
         "name": ("bytes", [f"example-{i}".encode()]), "blob": ("bytes", [bytes([0, 255, i, 0x80])]),
         "pair": ("bytes", [b"", "\u00e9t\u00e9".encode()]),
         "tags": ("bytes", [f"t{j}".encode() for j in range(i % 4)]),
         "weights": ("float", [0.25 * j for j in range(i % 3)]),
         "seq": ("float", [float(i + j) for j in range(2 * (i % 3))])}
    if i % 2 == 0:
        f["ids"] = ("int64", [100 * i + j for j in range(i % 5)])
    if i % 3 == 1:
        f["opt"] = ("float", [2.0 ** -i])
    if i % 2 == 1:
        f["empty"] = ("none", [])
    return f


N_EXAMPLES = 6


def tf_example(tf, i):
    feature = {}
    for key, (kind, values) in example_features(i).items():
        if kind == "int64":
            feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        elif kind == "float":
            feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        elif kind == "bytes":
            feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        else:
            feature[key] = tf.train.Feature()
    return tf.train.Example(features=tf.train.Features(feature=feature))


def tf_spec(tf, desc):
    kind, shape, dtype, default = desc
    dt = {"int64": tf.int64, "float32": tf.float32, "string": tf.string}[dtype]
    if kind == "var":
        return tf.io.VarLenFeature(dt)
    if kind == "seq":
        return tf.io.FixedLenSequenceFeature(shape, dt, allow_missing=True, default_value=default)
    return tf.io.FixedLenFeature(shape, dt, default_value=default)


def describe(value):
    """A parsed value (dense tensor or SparseTensor) as JSON."""
    import tensorflow as tf

    if isinstance(value, tf.SparseTensor):
        return {"sparse": {"indices": value.indices.numpy().tolist(), "values": describe(value.values),
                           "dense_shape": value.dense_shape.numpy().tolist()}}
    array = np.asarray(value.numpy(), dtype=object if value.dtype == tf.string else None)
    if value.dtype == tf.string:
        flat = [bytes(v).hex() for v in array.reshape(-1).tolist()]
    else:
        flat = array.reshape(-1).tolist()
    return {"dtype": value.dtype.name, "shape": list(array.shape), "values": flat}


def error(exc):
    return {"error": type(exc).__name__, "message": str(exc).strip().splitlines()[0][:300]}


def parse_results(tf, records):
    out = {}
    for name, descs in PARSE_SCENARIOS.items():
        spec = {k: tf_spec(tf, d) for k, d in descs.items()}
        single = []
        for r in records:
            try:
                single.append({k: describe(v) for k, v in tf.io.parse_single_example(r, spec).items()})
            except (tf.errors.OpError, ValueError) as exc:  # TF's error is the reference
                single.append(error(exc))
        try:
            batch = {k: describe(v) for k, v in tf.io.parse_example(tf.constant(records), spec).items()}
        except (tf.errors.OpError, ValueError) as exc:
            batch = error(exc)
        out[name] = {"single": single, "batch": batch}
    return out


def damaged(data, how):
    what, arg = how
    b = bytearray(data)
    if what == "flip":
        b[arg] ^= 0x40
    elif what == "cut":
        b = b[:arg]
    elif what == "keep_first_plus":
        first = 16 + int.from_bytes(data[:8], "little")
        b = b[:first + arg]
    elif what == "long_length":  # a header claiming ``arg`` bytes, its length CRC valid, then 8 bytes
        # (TF 2.21 dies of a segmentation fault when the claim is 2**40: the tests check distrib's answer)
        length = arg.to_bytes(8, "little")
        b = bytearray(length + masked_crc32c(length).to_bytes(4, "little") + b"\0" * 8)
    elif what == "garbage":
        b = bytearray(hashlib.sha256(b"garbage").digest() * (arg // 32))
    return bytes(b)


def masked_crc32c(data):
    """TFRecord's masked CRC-32C, bit by bit (Castagnoli polynomial, reflected): only for tiny inputs."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_all(tf, path, compression=""):
    got = []
    try:
        for r in tf.data.TFRecordDataset(str(path), compression_type=compression):
            got.append(r.numpy())
        return {"records": [g.hex() for g in got]}
    except tf.errors.OpError as exc:
        return {"records": [g.hex() for g in got], **error(exc)}


#: records per part file (parts/part-<i>.tfrecord hold b"part<i>-<j>")
PART_SIZES = [3, 5, 2, 4]


def parallel_reads(tf):
    """The order TF reads the part files in, plain and with ``num_parallel_reads``."""
    (OUT / "parts").mkdir(exist_ok=True)
    paths = []
    for i, n in enumerate(PART_SIZES):
        path = OUT / "parts" / f"part-{i}.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for j in range(n):
                writer.write(f"part{i}-{j}".encode())
        paths.append(str(path))
    out = {}
    for reads in (None, 2, 3):
        got = tf.data.TFRecordDataset(paths, num_parallel_reads=reads)
        out[f"list/{reads}"] = [r.decode() for r in got.as_numpy_iterator()]
        names = tf.data.Dataset.list_files(str(OUT / "parts" / "part-*.tfrecord"), shuffle=False)
        out[f"list_files/{reads}"] = [r.decode() for r in tf.data.TFRecordDataset(names, num_parallel_reads=reads)
                                      .as_numpy_iterator()]
    return out


def images(tf):
    h, w = 24, 32
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = np.stack([(xx * 8) % 256, (yy * 10) % 256, ((xx + yy) * 5 + (xx * yy) % 7 * 20) % 256], -1).astype(np.uint8)
    gray = ((xx * 7 + yy * 3 + (xx * yy) % 11 * 9) % 256).astype(np.uint8)[..., None]
    rgba = np.concatenate([rgb, ((xx + 2 * yy) * 6 % 256).astype(np.uint8)[..., None]], -1)
    gray16 = ((xx * 2000 + yy * 731 + 17) % 65536).astype(np.uint16)[..., None]
    rgb16 = np.stack([(xx * 2000 + 255) % 65536, (yy * 2600 + 3) % 65536, (xx * yy * 97) % 65536],
                     -1).astype(np.uint16)
    sources = {"rgb": rgb, "gray": gray, "rgba": rgba, "gray16": gray16, "rgb16": rgb16}
    files = {
        "rgb_q90.jpg": tf.io.encode_jpeg(rgb, quality=90),
        "rgb_q95_444.jpg": tf.io.encode_jpeg(rgb, quality=95, chroma_downsampling=False),
        "gray_q90.jpg": tf.io.encode_jpeg(gray, quality=90),
        "rgb.png": tf.io.encode_png(rgb), "gray.png": tf.io.encode_png(gray), "rgba.png": tf.io.encode_png(rgba),
        "gray16.png": tf.io.encode_png(gray16), "rgb16.png": tf.io.encode_png(rgb16),
    }
    pixels = {f"source:{k}": v for k, v in sources.items()}
    for name, data in files.items():
        (OUT / name).write_bytes(data.numpy())
        if name.endswith(".jpg"):
            for ch in (0, 1, 3):
                pixels[f"{name}:decode_jpeg:{ch}"] = tf.io.decode_jpeg(data, channels=ch).numpy()
            pixels[f"{name}:decode_jpeg:ratio2"] = tf.io.decode_jpeg(data, ratio=2).numpy()
            for method in ("INTEGER_ACCURATE", "INTEGER_FAST"):
                pixels[f"{name}:decode_jpeg:{method}"] = tf.io.decode_jpeg(data, dct_method=method).numpy()
            pixels[f"{name}:decode_jpeg:no_fancy"] = tf.io.decode_jpeg(data, fancy_upscaling=False).numpy()
        else:
            for ch in (0, 1, 3, 4):
                pixels[f"{name}:decode_png:{ch}"] = tf.io.decode_png(data, channels=ch).numpy()
            pixels[f"{name}:decode_png16:0"] = tf.io.decode_png(data, dtype=tf.uint16).numpy()
        pixels[f"{name}:decode_image"] = tf.io.decode_image(data).numpy()
    return pixels


def main():
    tf = _tf()
    OUT.mkdir(parents=True, exist_ok=True)
    records = [tf_example(tf, i).SerializeToString() for i in range(N_EXAMPLES)]
    names = {"": "examples.tfrecord", "GZIP": "examples.tfrecord.gz", "ZLIB": "examples.tfrecord.zz"}
    for compression, name in names.items():
        with tf.io.TFRecordWriter(str(OUT / name), options=compression or None) as writer:
            for r in records:
                writer.write(r)
    result = {"tensorflow": tf.__version__, "n_examples": N_EXAMPLES, "scenarios": PARSE_SCENARIOS,
              "records": [r.hex() for r in records],
              "read": {c or "NONE": read_all(tf, OUT / n, c) for c, n in names.items()},
              "parse": parse_results(tf, records)}
    data = (OUT / "examples.tfrecord").read_bytes()
    result["damage"] = {}
    for name, how in DAMAGE.items():
        path = OUT.parent / f"_damaged_{name}.tfrecord"
        try:
            path.write_bytes(damaged(data, how))
            result["damage"][name] = {"how": how, **read_all(tf, path)}
        finally:
            path.unlink(missing_ok=True)
    result["written_by_distrib"] = {}
    for compression, suffix in (("", ""), ("GZIP", ".gz"), ("ZLIB", ".zz")):
        path = OUT / f"written_by_distrib.tfrecord{suffix}"
        if path.exists():
            result["written_by_distrib"][compression or "NONE"] = read_all(tf, path, compression)
    result["parallel_reads"] = parallel_reads(tf)
    np.savez_compressed(OUT / "pixels.npz", **images(tf))
    (OUT / "tfrecord_io.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
