"""TFRecord reading, Example parsing and JPEG decoding: distrib.io / TFRecordDataset against tf.data.

One invocation, interleaved rounds, one thread each (``--tf-python`` names TensorFlow's
interpreter; default: $TF_PYTHON, /work/tfvenv/bin/python, else bench/tf_peer's venv):

* records/s reading 20,000 Example records (~230 bytes) from a plain and a GZIP file:
  a bare Python framing loop without CRC checks (the floor of any Python reader),
  `RecordReader` (both CRCs), `TFRecordDataset`, and ``tf.data.TFRecordDataset``,
  element by element and in batches of 1,024 (TF's eager iteration costs per element);
* Examples/s parsing them in batches of 64: `parse_example` vs ``tf.io.parse_example``;
* images/s decoding a 256x256 4:2:0 JPEG: `decode_jpeg` (simplejpeg, TF's settings), Pillow's
  own decode (its accurate IDCT; what distrib used before), and ``tf.io.decode_jpeg``; and
  `decode_jpeg` on two threads (simplejpeg releases the GIL: up to 2x with 2 free cores).

    python bench/bench_tfrecord_io.py --rounds 5 [--parts read,parse,decode]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import torch

from distrib import io as dio
from distrib.data import TFRecordDataset
from distrib.io.records import RecordReader

N_RECORDS = 20_000
TF_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    plain, gz, jpeg_path, n, parts = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    out = {}
    for name, path, comp in (("read_plain", plain, ""), ("read_gzip", gz, "GZIP")) if "read" in parts else ():
        ds = tf.data.TFRecordDataset(path, compression_type=comp)
        t = time.perf_counter(); k = sum(1 for _ in ds.as_numpy_iterator()); out[name] = k / (time.perf_counter() - t)
        t = time.perf_counter(); k = sum(len(b) for b in ds.batch(1024).as_numpy_iterator())
        out[name + "_batched"] = k / (time.perf_counter() - t)
    spec = {"x": tf.io.FixedLenFeature([8], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64),
            "tags": tf.io.VarLenFeature(tf.string)}
    if "parse" in parts:
        batches = [b for b in tf.data.TFRecordDataset(plain).batch(64)]
        t = time.perf_counter()
        for b in batches: tf.io.parse_example(b, spec)
        out["parse"] = n / (time.perf_counter() - t)
    if "decode" in parts:
        data = tf.constant(open(jpeg_path, "rb").read())
        t = time.perf_counter()
        for _ in range(200): tf.io.decode_jpeg(data)
        out["decode"] = 200 / (time.perf_counter() - t)
    print(json.dumps(out))
""")


def bare_loop(path: str) -> int:
    """Framing only, no CRC: the floor of a Python reader."""
    count = 0
    with open(path, "rb", buffering=1 << 18) as f:
        read = f.read
        while True:
            header = read(12)
            if not header:
                return count
            read(int.from_bytes(header[:8], "little"))
            read(4)
            count += 1


def rate(fn) -> float:
    t = time.perf_counter()
    n = fn()
    return n / (time.perf_counter() - t)


def write_files(tmp: Path) -> tuple:
    records = []
    for i in range(N_RECORDS):
        records.append(dio.Example(features=dio.Features(feature={
            "x": dio.Feature(float_list=dio.FloatList(value=[i * 0.5 + j for j in range(8)])),
            "y": dio.Feature(int64_list=dio.Int64List(value=[i % 10])),
            "tags": dio.Feature(bytes_list=dio.BytesList(value=[b"tag%d" % j for j in range(i % 3)])),
            "name": dio.Feature(bytes_list=dio.BytesList(value=[b"example-%08d" % i * 4]))})).SerializeToString())
    paths = (str(tmp / "r.tfrecord"), str(tmp / "r.tfrecord.gz"))
    for path, comp in zip(paths, (None, "GZIP")):
        with dio.TFRecordWriter(path, comp) as writer:
            for r in records:
                writer.write(r)
    yy, xx = torch.meshgrid(torch.arange(256), torch.arange(256), indexing="ij")
    image = torch.stack([(xx * 3 + yy) % 256, (yy * 5) % 256, (xx * yy) % 251], -1).to(torch.uint8)
    jpeg = tmp / "x.jpg"
    jpeg.write_bytes(dio.encode_jpeg(image, quality=90))
    return paths + (str(jpeg),)


def decode_rates(jpeg: str, n: int = 200) -> dict:
    import io

    import numpy as np
    from PIL import Image

    data = dio.read_file(jpeg)
    out = {"decode": rate(lambda: [dio.decode_jpeg(data) for _ in range(n)] and n),
           "decode_pillow": rate(lambda: [np.asarray(Image.open(io.BytesIO(data))) for _ in range(n)] and n)}

    def two_threads() -> int:
        workers = [threading.Thread(target=lambda: [dio.decode_jpeg(data) for _ in range(n // 2)])
                   for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return n

    out["decode_2threads"] = rate(two_threads)
    return out


def distrib_round(plain: str, gz: str, jpeg: str, parts: set) -> dict:
    out: dict = {}
    if "decode" in parts:
        out.update(decode_rates(jpeg))
    if "parse" in parts:
        spec = {"x": dio.FixedLenFeature([8], torch.float32), "y": dio.FixedLenFeature([], torch.int64),
                "tags": dio.VarLenFeature("string")}
        batches = list(TFRecordDataset(plain).batch(64))
        t = time.perf_counter()
        for b in batches:
            dio.parse_example(b, spec)
        out["parse"] = N_RECORDS / (time.perf_counter() - t)
    if "read" in parts:
        out.update(read_rates(plain, gz))
    return out


def read_rates(plain: str, gz: str) -> dict:
    def reader(path, comp):
        def go():
            n = 0
            with RecordReader(path, comp) as r:
                while True:
                    block = r.read(256)
                    if not block:
                        return n
                    n += len(block)
        return go

    out = {"bare_plain": rate(lambda: bare_loop(plain)),
           "reader_plain": rate(reader(plain, None)), "reader_gzip": rate(reader(gz, "GZIP")),
           "dataset_plain": rate(lambda: sum(1 for _ in TFRecordDataset(plain))),
           "dataset_gzip": rate(lambda: sum(1 for _ in TFRecordDataset(gz, compression_type="GZIP"))),
           "dataset_plain_batched": rate(lambda: sum(len(b) for b in TFRecordDataset(plain).batch(1024))),
           "dataset_gzip_batched": rate(lambda: sum(len(b) for b in TFRecordDataset(gz, compression_type="GZIP")
                                                    .batch(1024)))}
    return out


def tf_python(given: str | None) -> str:
    for candidate in (given, os.environ.get("TF_PYTHON"), "/work/tfvenv/bin/python"):
        if candidate and Path(candidate).exists():
            return candidate
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tf_peer import ensure_tf_venv

    return ensure_tf_venv()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tf-python", default=None)
    parser.add_argument("--parts", default="read,parse,decode", help="comma-separated: read, parse, decode")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    torch.set_num_threads(1)
    tf = tf_python(args.tf_python)
    rows: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        plain, gz, jpeg = write_files(Path(tmp))
        for _ in range(args.rounds):
            for k, v in distrib_round(plain, gz, jpeg, parts).items():
                rows.setdefault(k, []).append(v)
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
            proc = subprocess.run([tf, "-c", TF_SCRIPT, plain, gz, jpeg, str(N_RECORDS), args.parts], env=env,
                                  capture_output=True, text=True, check=True)
            for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items():
                rows.setdefault(f"tf_{k}", []).append(v)
    med = {k: statistics.median(v) for k, v in rows.items()}
    table = [("read, plain: bare Python framing loop, no CRC", "bare_plain", "tf_read_plain"),
             ("read, plain: distrib `RecordReader` (CRCs checked)", "reader_plain", "tf_read_plain"),
             ("read, plain: distrib `TFRecordDataset`", "dataset_plain", "tf_read_plain"),
             ("read, plain: `tf.data.TFRecordDataset`", "tf_read_plain", "tf_read_plain"),
             ("read, plain, `.batch(1024)`: distrib `TFRecordDataset`", "dataset_plain_batched",
              "tf_read_plain_batched"),
             ("read, plain, `.batch(1024)`: `tf.data.TFRecordDataset`", "tf_read_plain_batched",
              "tf_read_plain_batched"),
             ("read, GZIP: distrib `RecordReader`", "reader_gzip", "tf_read_gzip"),
             ("read, GZIP: distrib `TFRecordDataset`", "dataset_gzip", "tf_read_gzip"),
             ("read, GZIP: `tf.data.TFRecordDataset`", "tf_read_gzip", "tf_read_gzip"),
             ("read, GZIP, `.batch(1024)`: distrib `TFRecordDataset`", "dataset_gzip_batched",
              "tf_read_gzip_batched"),
             ("read, GZIP, `.batch(1024)`: `tf.data.TFRecordDataset`", "tf_read_gzip_batched",
              "tf_read_gzip_batched"),
             ("parse_example, batches of 64: distrib", "parse", "tf_parse"),
             ("parse_example, batches of 64: TF", "tf_parse", "tf_parse"),
             ("decode_jpeg 256x256 4:2:0: distrib (simplejpeg, TF's settings)", "decode", "tf_decode"),
             ("decode_jpeg 256x256 4:2:0: Pillow's own decode (accurate IDCT)", "decode_pillow", "tf_decode"),
             ("decode_jpeg 256x256 4:2:0: distrib on 2 threads", "decode_2threads", "tf_decode"),
             ("decode_jpeg 256x256 4:2:0: TF", "tf_decode", "tf_decode")]
    print("| what | median per second | min-max | vs TF |\n|---|---:|---:|---:|")
    for label, key, base in [row for row in table if row[1] in med]:
        print(f"| {label} | {med[key]:,.0f} | {min(rows[key]):,.0f} - {max(rows[key]):,.0f} | "
              f"{med[key] / med[base]:.2f}x |")


if __name__ == "__main__":
    main()
