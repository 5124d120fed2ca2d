"""Cost of global-batch dropout vs torch's own dropout, as same-run ratios.

Times blocks of (a) one training step (forward, backward, SGD step) of an MLP
with two dropout layers and (b) one dropout layer's forward alone, with
torch's ``Dropout`` and with the layer distrib switches to in a multi-replica
scope (`distrib.strategies.global_dropout`, here with a stand-in 2-replica
strategy and the batch's global place known), interleaved block by block;
reports median(global) / median(torch) per case. One thread by default.

Run: python bench/bench_dropout.py [--blocks 15] [--threads 1]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from distrib.data import batch_position
from distrib.data.batch_position import RowPosition
from distrib.strategies.global_dropout import use_global_batch_dropout


class _TwoReplicas:
    num_replicas_in_sync, replica_id = 2, 0


def _mlp(keyed: bool, width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, width), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                torch.nn.Linear(width, 10))
    if keyed:
        for m in model.modules():
            use_global_batch_dropout(m, lambda: _TwoReplicas())
    return model


def _time_block(fn, reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    x, y = torch.randn(args.batch, 784), torch.randint(0, 10, (args.batch,))
    batch_position.set_current(RowPosition(args.batch, args.batch))  # replica 1's rows of a 2x global batch

    def train_step(model, opt):
        def step():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return step

    cases = {}
    for keyed in (False, True):
        model = _mlp(keyed, args.width)
        layer = torch.nn.Dropout(0.5)
        if keyed:
            use_global_batch_dropout(layer, lambda: _TwoReplicas())
        h = torch.randn(args.batch, args.width)
        cases[keyed] = {"training step": train_step(model, torch.optim.SGD(model.parameters(), lr=0.01)),
                        "dropout forward": lambda layer=layer, h=h: layer(h)}
    times = {(k, name): [] for k in cases for name in cases[k]}
    for _ in range(args.blocks):
        for name in cases[False]:
            for keyed in (False, True):
                times[(keyed, name)].append(_time_block(cases[keyed][name], 20))
    print(f"batch {args.batch}, width {args.width}, {args.threads} thread(s), {args.blocks} blocks of 20")
    print("| case | torch (µs) | global-batch (µs) | ratio |")
    print("|---|---:|---:|---:|")
    for name in cases[False]:
        base = statistics.median(times[(False, name)])
        mine = statistics.median(times[(True, name)])
        print(f"| {name} | {base * 1e6:,.0f} | {mine * 1e6:,.0f} | {mine / base:.2f}x |")


if __name__ == "__main__":
    main()
