"""`fit` on one GPU against a hand-written loop over GPU-resident data (issue: speed where people train).

Systems (each in its own process, interleaved round by round; figures are
examples per second over the timed steps and the ratio to ``loop`` of the
same round):

* ``loop``: the plain PyTorch loop, data already on the GPU, indexed by a
  shuffled permutation on the GPU (the baseline, ratio 1.0);
* ``fit_host``: ``distrib.Model.fit`` under ``OneDeviceStrategy`` from a host
  ``Dataset`` (batches read ahead, copied from pinned memory on a side stream);
* ``fit_device``: the same from a ``Dataset`` of GPU tensors (gathered there);
* ``fit_host_jit``: ``fit_host`` with ``compile(jit_compile=True)``;
* ``loop_bf16`` / ``fit_host_bf16``: bf16 autocast in the loop against
  ``mixed_bfloat16`` in ``fit``.

Models: ``cnn`` (the TF tutorials' MNIST CNN, RMSprop, batch 128) and ``resnet18``
(3x32x32 inputs, SGD with momentum, batch 256). TF32 is on for every system.
The loop uses torch's optimizer (its CUDA default: multi-tensor kernels);
``fit`` uses distrib's Keras-rule optimizer of the same name (multi-tensor
kernels too).

Run on a GPU host:  ``python bench/bench_gpu_fit.py --model resnet18 --rounds 3``
Check it on a CPU:   ``python bench/bench_gpu_fit.py --device cpu --smoke``
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEMS = ["loop", "fit_host", "fit_device", "fit_host_jit", "loop_bf16", "fit_host_bf16"]
BATCH = {"cnn": 128, "resnet18": 256}


def _basic_block(torch, cin, cout, stride):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))

    return Block()


def resnet18(torch, classes=10, width=64):
    """ResNet-18 for 32x32 images: a 3x3 stem, four stages of two basic blocks, average pooling."""
    nn = torch.nn
    layers, cin = [nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()], width
    for stage, stride in enumerate((1, 2, 2, 2)):
        cout = width * 2 ** stage
        layers += [_basic_block(torch, cin, cout, stride), _basic_block(torch, cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def _setup(model_name, device, smoke):
    import numpy as np
    import torch

    sys.path.insert(0, HERE)
    from workloads import cnn, synthetic_mnist

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    if model_name == "cnn":
        x, y = (torch.from_numpy(a) for a in synthetic_mnist(np))
        module = cnn(torch)
    else:
        n = 2048 if smoke else 50_000
        gen = torch.Generator().manual_seed(0)
        x = torch.rand(n, 3, 32, 32, generator=gen)
        y = torch.randint(0, 10, (n,), generator=gen)
        module = resnet18(torch, width=8 if smoke else 64)
    return torch, x, y, module


def _loop(model_name, device, steps, bf16, smoke):
    torch, x, y, module = _setup(model_name, device, smoke)
    batch = 8 if smoke else BATCH[model_name]
    x, y, module = x.to(device), y.to(device), module.to(device)
    opt = (torch.optim.RMSprop(module.parameters(), lr=1e-3, alpha=0.9, eps=1e-7) if model_name == "cnn"
           else torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9))
    loss_fn = torch.nn.CrossEntropyLoss()
    stamps, order, at = [], torch.randperm(len(x), device=device), 0
    for _ in range(steps):
        if at + batch > len(x):
            order, at = torch.randperm(len(x), device=device), 0
        idx = order[at:at + batch]
        at += batch
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(module(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        stamps.append(time.perf_counter())
    _sync(torch, device)
    stamps[-1] = time.perf_counter()
    return stamps, batch


def _fit(model_name, device, steps, on_device, jit, bf16, smoke):
    torch, x, y, module = _setup(model_name, device, smoke)
    import distrib

    batch = 8 if smoke else BATCH[model_name]
    if bf16:
        distrib.mixed_precision.set_global_policy("mixed_bfloat16")
    strategy = distrib.OneDeviceStrategy(device)
    stamps = []

    class Stamp(distrib.callbacks.Callback):
        def on_train_batch_end(self, step, logs=None):
            stamps.append(time.perf_counter())

    with strategy.scope():
        model = distrib.Model(module)
        optimizer = (distrib.optimizers.RMSprop(learning_rate=1e-3) if model_name == "cnn"
                     else distrib.optimizers.SGD(learning_rate=0.1, momentum=0.9))
        model.compile(optimizer=optimizer, loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=jit)
    if on_device:
        x, y = x.to(device), y.to(device)
    dataset = distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).repeat().batch(batch)
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[Stamp()])
    _sync(torch, device)
    stamps[-1] = time.perf_counter()
    return stamps, batch


def _sync(torch, device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _worker(system, model_name, device, steps, warmup, smoke):
    bf16 = system.endswith("_bf16")
    if system.startswith("loop"):
        stamps, batch = _loop(model_name, device, steps, bf16, smoke)
    else:
        stamps, batch = _fit(model_name, device, steps, system == "fit_device", system.endswith("_jit"), bf16,
                             smoke)
    window = stamps[warmup:]
    seconds = window[-1] - window[0]
    print(json.dumps({"examples_per_s": (len(window) - 1) * batch / seconds}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(BATCH), default="cnn")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=40, help="steps left out (compiling, cudnn autotuning)")
    parser.add_argument("--only", default=None, help="comma-separated systems (loop always runs)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check the script, not the speed")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.warmup, args.rounds = min(args.steps, 12), min(args.warmup, 4), 1
    if args.worker:
        _worker(args.worker, args.model, args.device, args.steps, args.warmup, args.smoke)
        return
    wanted = SYSTEMS if args.only is None else ["loop"] + [s for s in args.only.split(",") if s != "loop"]
    figures = {s: [] for s in wanted}
    for round_ in range(args.rounds):
        for system in (wanted if round_ % 2 == 0 else wanted[::-1]):
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", system, "--model", args.model,
                   "--device", args.device, "--steps", str(args.steps), "--warmup", str(args.warmup)]
            env = {**os.environ, "PYTHONPATH": os.path.join(HERE, "..", "src")}
            out = subprocess.run(cmd + (["--smoke"] if args.smoke else []), capture_output=True, text=True,
                                 env=env, timeout=1800)
            if out.returncode != 0:
                raise SystemExit(f"{system} failed:\n{out.stderr[-3000:]}")
            figures[system].append(json.loads(out.stdout.strip().splitlines()[-1])["examples_per_s"])
    import torch

    card = torch.cuda.get_device_name(0) if torch.cuda.is_available() and "cuda" in args.device else args.device
    print(f"\n{args.model} on {card}: {args.rounds} rounds of {args.steps} steps, first {args.warmup} left out\n")
    print("| system | examples/s (median) | ratio to loop (median of rounds) | rounds |")
    print("|---|---:|---:|---|")
    for system, values in figures.items():
        ratios = [v / b for v, b in zip(values, figures["loop"])]
        print(f"| {system} | {statistics.median(values):,.0f} | {statistics.median(ratios):.2f}x | "
              f"{' / '.join(f'{r:.2f}' for r in ratios)} |")


if __name__ == "__main__":
    main()
