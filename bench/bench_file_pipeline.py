"""File-pipeline throughput: distrib's parallel map against a torch DataLoader and tf.data, one invocation.

Run: ``python bench/bench_file_pipeline.py`` (``--help`` for options). TF runs in
its own venv: ``--tf-python PATH`` or ``TF_PYTHON``, else ``bench/.tf-venv``
when it exists (``--install-tf`` creates it, see `tf_peer`); without one the
tf.data rows are left out.

Two pipelines over the same files, one epoch each, batches of 64:

- JPEG: 2,000 JPEGs of 256x256 in a temp dir: read the file, decode
  (distrib.io.decode_jpeg / tf.io.decode_jpeg), random crop 224, random flip,
  to float in [0, 1];
- TFRecord: the same images as ``tf.train.Example`` records in 8 shards:
  read, parse_single_example, decode, the same augmentation;
- python: JSON lines of 3,000 numbers parsed and reduced in pure Python
  (the GIL is held): threads against ``Options().threading.workers = "processes"``.

Contenders: distrib serial ``map``; distrib ``.map(f, num_parallel_calls=W)
.batch(64).prefetch(AUTOTUNE)`` for each W; torch ``DataLoader`` with 0 and W
workers (over the files, or over the records read into memory for TFRecord);
tf.data with ``num_parallel_calls=W`` and a private pool of W threads. One
torch thread per worker. Contenders run round-robin, one epoch each per round;
the table has the median images/s over rounds and ratios of medians.
"""
from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import torch

from distrib import image
from distrib import io as dio
from distrib.data import AUTOTUNE, STRING, Dataset, Options, TFRecordDataset

HERE = Path(__file__).resolve().parent
BATCH, SIZE, CROP, SHARDS = 64, 256, 224, 8
FEATURES = {"image/encoded": dio.FixedLenFeature([], STRING), "label": dio.FixedLenFeature([], torch.int64)}


# ----------------------------------------------------------------- the work
def augment(img: torch.Tensor) -> torch.Tensor:
    img = image.random_crop(img, (CROP, CROP, 3))
    return image.random_flip_left_right(img).float() / 255.0


def load_jpeg(path) -> torch.Tensor:
    return augment(dio.decode_jpeg(dio.read_file(path), channels=3))


def python_work(line) -> torch.Tensor:
    """Pure-Python parsing (holds the GIL): the case worker processes are for."""
    values = json.loads(str(line))
    return torch.tensor([sum(v * v for v in values[i::4]) for i in range(4)])


def load_record(record) -> tuple:
    parsed = dio.parse_single_example(record, FEATURES)
    return augment(dio.decode_jpeg(parsed["image/encoded"], channels=3)), parsed["label"]


class Files(torch.utils.data.Dataset):
    def __init__(self, items: List, fn: Callable) -> None:
        self.items, self.fn = items, fn

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.fn(self.items[i])


# ------------------------------------------------------------------ the data
def write_data(root: Path, n: int) -> Dict[str, List[str]]:
    from PIL import Image

    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 255, SIZE, dtype=np.float32)
    paths = []
    writers = [dio.TFRecordWriter(str(root / f"train-{k:02d}.tfrecord")) for k in range(SHARDS)]
    for i in range(n):
        pixels = (ramp[None, :, None] * 0.5 + ramp[:, None, None] * 0.3 + rng.integers(0, 64, (SIZE, SIZE, 3)))
        path = root / f"img-{i:05d}.jpg"
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path, quality=90)
        paths.append(str(path))
        example = dio.Example(features=dio.Features(feature={
            "image/encoded": dio.Feature(bytes_list=dio.BytesList(value=[path.read_bytes()])),
            "label": dio.Feature(int64_list=dio.Int64List(value=[i % 10]))}))
        writers[i % SHARDS].write(example.SerializeToString())
    for w in writers:
        w.close()
    lines = [json.dumps(rng.random(3000).round(6).tolist()) for _ in range(n)]
    return {"jpeg": paths, "tfrecord": [str(root / f"train-{k:02d}.tfrecord") for k in range(SHARDS)],
            "python": lines}


# -------------------------------------------------------------- contenders
def epoch(batches) -> int:
    n = 0
    for b in batches:
        n += (b[0] if isinstance(b, (tuple, list)) else b).shape[0]
    return n


def distrib_run(kind: str, data: Dict[str, List[str]], workers: Optional[int], processes: bool = False) -> int:
    if kind == "python":
        ds = Dataset.from_tensor_slices(data["python"]).map(python_work, num_parallel_calls=workers)
    elif kind == "jpeg":
        ds = Dataset.from_tensor_slices(data["jpeg"]).map(load_jpeg, num_parallel_calls=workers)
    else:
        ds = TFRecordDataset(data["tfrecord"]).map(load_record, num_parallel_calls=workers)
    options = Options()
    options.threading.workers = "processes" if processes else "threads"
    ds = ds.with_options(options).batch(BATCH)
    return epoch(ds.prefetch(AUTOTUNE) if workers else ds)


def loader_run(kind: str, data: Dict[str, List[str]], records: List[bytes], workers: int) -> int:
    files = (Files(data["jpeg"], load_jpeg) if kind == "jpeg" else Files(data["python"], python_work)
             if kind == "python" else Files(records, load_record))
    return epoch(torch.utils.data.DataLoader(files, batch_size=BATCH, num_workers=workers,
                                             persistent_workers=False))


TF_SCRIPT = r"""
import json, sys, time
import tensorflow as tf
spec = json.loads(sys.argv[1])
def augment(img):
    img = tf.image.random_crop(img, (224, 224, 3))
    return tf.image.convert_image_dtype(tf.image.random_flip_left_right(img), tf.float32)
def load_jpeg(path):
    return augment(tf.io.decode_jpeg(tf.io.read_file(path), channels=3))
features = {"image/encoded": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
def load_record(record):
    parsed = tf.io.parse_single_example(record, features)
    return augment(tf.io.decode_jpeg(parsed["image/encoded"], channels=3)), parsed["label"]
out = {}
for w in spec["workers"]:
    if spec["kind"] == "jpeg":
        ds = tf.data.Dataset.from_tensor_slices(spec["files"]).map(load_jpeg, num_parallel_calls=w)
    else:
        ds = tf.data.TFRecordDataset(spec["files"]).map(load_record, num_parallel_calls=w)
    options = tf.data.Options()
    options.threading.private_threadpool_size = w
    options.threading.max_intra_op_parallelism = 1
    ds = ds.batch(64).prefetch(tf.data.AUTOTUNE).with_options(options)
    for _ in ds.take(2):
        pass
    start = time.perf_counter(); cpu = time.process_time(); n = 0
    for b in ds:
        n += int((b[0] if isinstance(b, tuple) else b).shape[0])
    out[str(w)] = [n, time.perf_counter() - start, time.process_time() - cpu]
print("RESULT " + json.dumps(out))
"""


def cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and of its reaped children (DataLoader workers,
    distrib's worker processes): images per CPU-second hold up on a shared machine, images/s do not."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def reap_children(deadline_s: float = 30.0) -> None:
    """Wait until the epoch's worker processes have exited and been reaped (their CPU time counted)."""
    gc.collect()
    end = time.monotonic() + deadline_s
    while multiprocessing.active_children() and time.monotonic() < end:
        time.sleep(0.01)  # poll: a pool's workers exit after their last task


def tf_run(python: str, kind: str, data: Dict[str, List[str]], workers: List[int]) -> Dict[int, tuple]:
    spec = json.dumps({"kind": kind, "files": data[kind], "workers": workers})
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([python, "-c", TF_SCRIPT, spec], capture_output=True, text=True, env=env, timeout=900)
    line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"tf.data peer failed:\n{out.stderr[-2000:]}")
    return {int(w): (n / s, n / max(c, 1e-9)) for w, (n, s, c) in json.loads(line[7:]).items()}


def find_tf(flag: Optional[str], install: bool) -> Optional[str]:
    if flag:
        return flag
    if os.environ.get("TF_PYTHON"):
        return os.environ["TF_PYTHON"]
    venv = HERE / ".tf-venv" / "bin" / "python"
    if (HERE / ".tf-venv" / ".ready").exists() or install:
        from tf_peer import ensure_tf_venv

        return ensure_tf_venv() if install else str(venv)
    return None


# ------------------------------------------------------------------- report
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", default=f"1,{len(os.sched_getaffinity(0))}",
                        help="comma-separated worker counts (default: 1 and the CPU count)")
    parser.add_argument("--tf-python", default=None, help="python of a venv with TensorFlow (or TF_PYTHON)")
    parser.add_argument("--install-tf", action="store_true", help="create bench/.tf-venv if missing")
    parser.add_argument("--pipelines", default="jpeg,tfrecord,python",
                        help="jpeg, tfrecord, python (pure-Python parsing: threads vs worker processes)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    workers = sorted({int(w) for w in args.workers.split(",")})
    tf_python = find_tf(args.tf_python, args.install_tf)
    with tempfile.TemporaryDirectory(prefix="distrib-bench-files-") as tmp:
        data = write_data(Path(tmp), args.images)
        records = [r for p in data["tfrecord"] for r in dio.tf_record_iterator(p)]
        for kind in args.pipelines.split(","):
            rates: Dict[str, List[float]] = {}
            per_cpu: Dict[str, List[float]] = {}

            def timed(name: str, fn: Callable[[], int]) -> None:
                cpu0, start = cpu_seconds(), time.perf_counter()
                n = fn()
                wall = time.perf_counter() - start
                reap_children()
                rates.setdefault(name, []).append(n / wall)
                per_cpu.setdefault(name, []).append(n / max(cpu_seconds() - cpu0, 1e-9))

            for _ in range(args.rounds):
                timed("distrib serial map", lambda: distrib_run(kind, data, None))
                for w in workers:
                    timed(f"distrib map(num_parallel_calls={w}) + prefetch", lambda: distrib_run(kind, data, w))
                    timed(f"DataLoader(num_workers={w})", lambda: loader_run(kind, data, records, w))
                timed("DataLoader(num_workers=0)", lambda: loader_run(kind, data, records, 0))
                for w in workers:
                    timed(f"distrib map(num_parallel_calls={w}), worker processes",
                          lambda: distrib_run(kind, data, w, processes=True))
                if kind != "python" and tf_python:
                    for w, (rate, cpu_rate) in tf_run(tf_python, kind, data, workers).items():
                        rates.setdefault(f"tf.data num_parallel_calls={w}", []).append(rate)
                        per_cpu.setdefault(f"tf.data num_parallel_calls={w}", []).append(cpu_rate)
            report(kind, rates, per_cpu, workers, args)


def report(kind: str, rates: Dict[str, List[float]], per_cpu: Dict[str, List[float]], workers: List[int],
           args: argparse.Namespace) -> None:
    med = {k: statistics.median(v) for k, v in rates.items()}
    cpu = {k: statistics.median(v) for k, v in per_cpu.items()}
    print(f"\n## {kind} pipeline: {args.images} images, batch {BATCH}, {args.rounds} rounds "
          f"(median images/s, min-max) - {platform.processor() or platform.machine()}, "
          f"{len(os.sched_getaffinity(0))} CPUs, torch {torch.__version__}\n")
    print("| pipeline | images/s | min-max | images per CPU-second |\n|---|---:|---:|---:|")
    for name, values in rates.items():
        print(f"| {name} | {med[name]:.0f} | {min(values):.0f}-{max(values):.0f} | {cpu[name]:.0f} |")
    print("\n| ratio (medians) | value |\n|---|---:|")
    for label, suffix in (("threads", " + prefetch"), ("processes", ", worker processes")):
        for w in workers:
            mine = med[f"distrib map(num_parallel_calls={w}){suffix}"]
            print(f"| distrib {label} W={w} / DataLoader(num_workers={w}) | "
                  f"{mine / med[f'DataLoader(num_workers={w})']:.2f} |")
            tf_name = f"tf.data num_parallel_calls={w}"
            if tf_name in med:
                print(f"| distrib {label} W={w} / tf.data W={w} | {mine / med[tf_name]:.2f} |")
        if len(workers) > 1:
            lo, hi = workers[0], workers[-1]
            speedup = med[f"distrib map(num_parallel_calls={hi}){suffix}"] / med[f"distrib map(num_parallel_calls={lo}){suffix}"]
            print(f"| distrib {label} scaling W={lo} -> W={hi} (fraction of linear) | {speedup / (hi / lo):.2f} |")
    for w in workers:
        tf_name = f"tf.data num_parallel_calls={w}"
        for label, suffix in (("threads", " + prefetch"), ("processes", ", worker processes")):
            mine = cpu[f"distrib map(num_parallel_calls={w}){suffix}"]
            print(f"| images per CPU-second: distrib {label} W={w} / DataLoader(num_workers={w}) | "
                  f"{mine / cpu[f'DataLoader(num_workers={w})']:.2f} |")
            if tf_name in cpu:
                print(f"| images per CPU-second: distrib {label} W={w} / tf.data W={w} | {mine / cpu[tf_name]:.2f} |")
    print(f"| distrib W={workers[0]} / serial map | "
          f"{med[f'distrib map(num_parallel_calls={workers[0]}) + prefetch'] / med['distrib serial map']:.2f} |")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
