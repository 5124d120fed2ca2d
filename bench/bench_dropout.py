"""Cost of global-batch dropout vs torch's own dropout, as same-run ratios.

Times blocks of (a) one training step (forward, backward, SGD step) of an MLP
with two dropout layers and (b) one dropout layer's forward alone, with
torch's ``Dropout`` and with the layer distrib switches to in a multi-replica
scope (`distrib.strategies.layer_patches.global_dropout`, here with a stand-in 2-replica
strategy and the batch's global place known), and (c) one
``scaled_dot_product_attention`` with ``dropout_p=0.1``, forward alone and
forward and backward, torch's outside a step and distrib's keyed one in a
stand-in 2-replica step; interleaved block by block; reports
median(global) / median(torch) per case, and torch's attention without
dropout (its fused kernel) for reference. One thread by default.

``--peak torch|keyed|fused`` instead runs one attention forward and backward
of ``--seq`` in this process (``fused``: torch's without dropout) and prints
how much its peak resident memory grew (run each in its own process).

Run: python bench/bench_dropout.py [--blocks 15] [--threads 1] [--seq 128]
     python bench/bench_dropout.py --peak keyed --seq 1024
"""
from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import time

import torch

from distrib.comm.options import CommunicationOptions
from distrib.data.distribution import batch_position
from distrib.data.distribution.batch_position import RowPosition
from distrib.strategies import context
from distrib.strategies.layer_patches.global_dropout import install_functional_dropout, use_global_batch_dropout


class _TwoReplicas:
    num_replicas_in_sync, replica_id = 2, 0
    communication_options = CommunicationOptions()


def _mlp(keyed: bool, width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, width), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                torch.nn.Linear(width, 10))
    if keyed:
        for m in model.modules():
            use_global_batch_dropout(m, lambda: _TwoReplicas())
    return model


def _attention(keyed: bool, batch: int, seq: int, grad: bool, dropout_p: float = 0.1):
    """One call of ``scaled_dot_product_attention`` on 4 heads of 32 (and its backward if ``grad``)."""
    q, k, v = (torch.randn(batch, 4, seq, 32, requires_grad=grad) for _ in range(3))
    step = context.replica_context(_TwoReplicas()) if keyed else contextlib.nullcontext()

    def call():
        with step, torch.set_grad_enabled(grad):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
        if grad:
            out.sum().backward()
    return call


def _peak(which: str, batch: int, seq: int) -> None:
    install_functional_dropout()
    batch_position.set_current(RowPosition(batch, batch))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _attention(which == "keyed", batch, seq, grad=True, dropout_p=0.0 if which == "fused" else 0.1)()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    weights_mib = batch * 4 * seq * seq * 4 / 2 ** 20
    print(f"{which}: batch {batch}, 4 heads, L = S = {seq} (float32 weights {weights_mib:,.0f} MiB): "
          f"peak resident memory grew {(after - before) / 1024:,.0f} MiB (from {before / 1024:,.0f} MiB)")


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
    parser.add_argument("--seq", type=int, default=128, help="attention: query and key length")
    parser.add_argument("--attention-batch", type=int, default=8)
    parser.add_argument("--peak", choices=("torch", "keyed", "fused"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.peak:
        _peak(args.peak, args.attention_batch, args.seq)
        return
    install_functional_dropout()
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
                        "dropout forward": lambda layer=layer, h=h: layer(h),
                        "attention forward": _attention(keyed, args.attention_batch, args.seq, grad=False),
                        "attention forward+backward": _attention(keyed, args.attention_batch, args.seq, grad=True)}
    fused = {"attention forward": _attention(False, args.attention_batch, args.seq, False, dropout_p=0.0),
             "attention forward+backward": _attention(False, args.attention_batch, args.seq, True, dropout_p=0.0)}
    times = {(k, name): [] for k in cases for name in cases[k]}
    times.update({("fused", name): [] for name in fused})
    for _ in range(args.blocks):
        for name in cases[False]:
            for keyed in (False, True):
                times[(keyed, name)].append(_time_block(cases[keyed][name], 20))
            if name in fused:
                times[("fused", name)].append(_time_block(fused[name], 20))
    print(f"batch {args.batch}, width {args.width}; attention: batch {args.attention_batch}, 4 heads of 32, "
          f"L = S = {args.seq}, dropout 0.1; {args.threads} thread(s), {args.blocks} blocks of 20")
    print("| case | torch (µs) | global-batch (µs) | ratio |")
    print("|---|---:|---:|---:|")
    for name in cases[False]:
        base = statistics.median(times[(False, name)])
        mine = statistics.median(times[(True, name)])
        print(f"| {name} | {base * 1e6:,.0f} | {mine * 1e6:,.0f} | {mine / base:.2f}x |")
    for name in fused:
        reference = statistics.median(times[("fused", name)])
        print(f"torch's {name} without dropout (its fused kernel): {reference * 1e6:,.0f} µs; global-batch is "
              f"{statistics.median(times[(True, name)]) / reference:.2f}x that")


if __name__ == "__main__":
    main()
