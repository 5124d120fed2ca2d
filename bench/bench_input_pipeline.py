"""Input-pipeline throughput: the TF tutorials' MNIST-shaped pipeline against plain PyTorch.

Run: ``python bench/bench_input_pipeline.py`` (``--help`` for options).

Every contender produces shuffled (x, y) batches of 128 from the same tensors
(60000 x 28 x 28 float32 images, int64 labels), reshuffling every epoch:

- plain loop, ``x[idx]``: ``perm = torch.randperm(n)`` per epoch, then
  ``x[perm[i:i+128]], y[...]`` - the baseline;
- plain loop, ``index_select``: the same with ``torch.index_select``;
- torch ``DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True)``;
- distrib ``Dataset.from_tensor_slices((x, y)).shuffle(60000).repeat().batch(128)``;
- the same through ``experimental_distribute_dataset`` with 1 replica, and
  replica 0 of 2 (64 rows per step: each replica gathers only its slice).

Repetitions are interleaved (one of each contender per round), and the
table reports the median examples/s with the min-max spread, and the ratios of
medians to both plain loops measured in the same run.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from typing import Callable, Dict, Iterator, List, Tuple

import torch

from distrib.data import Dataset
from distrib.testing.simulated import run_workers

N, BATCH = 60000, 128


def plain_loop(x: torch.Tensor, y: torch.Tensor, use_index_select: bool) -> Iterator[Tuple[int, int]]:
    while True:
        perm = torch.randperm(N)
        for i in range(0, N, BATCH):
            idx = perm[i:i + BATCH]
            if use_index_select:
                xb, yb = torch.index_select(x, 0, idx), torch.index_select(y, 0, idx)
            else:
                xb, yb = x[idx], y[idx]
            yield xb.shape[0], yb.shape[0]


def loader_loop(x: torch.Tensor, y: torch.Tensor) -> Iterator[Tuple[int, int]]:
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH,
                                         shuffle=True)
    while True:
        for xb, yb in loader:
            yield xb.shape[0], yb.shape[0]


def distrib_loop(x: torch.Tensor, y: torch.Tensor) -> Iterator[Tuple[int, int]]:
    dataset = Dataset.from_tensor_slices((x, y)).shuffle(N).repeat().batch(BATCH)
    for xb, yb in dataset:
        yield xb.shape[0], yb.shape[0]


def distributed_loop(x: torch.Tensor, y: torch.Tensor, replicas: int) -> Iterator[Tuple[int, int]]:
    dataset = Dataset.from_tensor_slices((x, y)).shuffle(N).repeat().batch(BATCH)
    # Build every replica's distributed dataset (they agree on a seed), then time replica 0 alone:
    # with a known-length global stream, iterating needs no collective.
    dist = run_workers(lambda s: s.experimental_distribute_dataset(dataset), replicas)[0]
    for xb, yb in dist:
        yield xb.shape[0], yb.shape[0]


def timed(stream: Iterator[Tuple[int, int]], batches: int) -> float:
    """Examples per second over the next ``batches`` batches of ``stream``."""
    start = time.perf_counter()
    examples = 0
    for _ in range(batches):
        examples += next(stream)[0]
    return examples / (time.perf_counter() - start)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--batches", type=int, default=600, help="batches timed per round (default 600)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.rand(N, 28, 28)
    y = torch.randint(0, 10, (N,))
    contenders: Dict[str, Callable[[], Iterator[Tuple[int, int]]]] = {
        "plain loop, x[idx] (baseline)": lambda: plain_loop(x, y, False),
        "plain loop, index_select": lambda: plain_loop(x, y, True),
        "torch DataLoader(shuffle=True)": lambda: loader_loop(x, y),
        "distrib Dataset": lambda: distrib_loop(x, y),
        "distrib distributed, 1 replica": lambda: distributed_loop(x, y, 1),
        "distrib distributed, replica 0 of 2": lambda: distributed_loop(x, y, 2),
    }
    streams = {name: make() for name, make in contenders.items()}
    for stream in streams.values():  # warm-up: first epoch's shuffle, allocator, lazy imports
        timed(stream, 50)
    results: Dict[str, List[float]] = {name: [] for name in contenders}
    for _ in range(args.repeats):
        for name, stream in streams.items():
            batches = args.batches if "DataLoader" not in name else max(20, args.batches // 10)
            results[name].append(timed(stream, batches))
    base = statistics.median(results["plain loop, x[idx] (baseline)"])
    fast = statistics.median(results["plain loop, index_select"])
    print(f"Input pipeline, MNIST-shaped ({N}x28x28 float32 + int64 labels), batch {BATCH}, "
          f"shuffle(60000).repeat(); torch {torch.__version__}, {args.threads} thread(s), "
          f"{platform.processor() or platform.machine()}, {args.repeats} interleaved rounds\n")
    print("| pipeline | median examples/s | spread (min-max) | vs plain x[idx] | vs index_select loop |")
    print("|---|---:|---:|---:|---:|")
    for name, values in results.items():
        med = statistics.median(values)
        print(f"| {name} | {med:,.0f} | {min(values):,.0f} - {max(values):,.0f} | {med / base:.2f}x "
              f"| {med / fast:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
