"""bf16 vs fp32 training curves of the TF tutorials' MNIST CNN under `distrib.Model.fit` (CPU, one process).

Trains the TF tutorials' Keras CNN (examples/mnist.py) on the offline MNIST data
with the custom-loop tutorial's optimizer (RMSprop, lr 1e-3) once under the ``float32`` policy
and once under ``mixed_bfloat16``, from the same initial weights and batches,
and records the running training loss after every step, the test loss and
accuracy after each epoch, and the steady step time (same-run ratio). Writes
``bench/mixed_precision.png`` and prints a Markdown table for RESULTS.md.

Run: python bench/bench_mixed_precision.py [--epochs 3] [--steps 70]
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import distrib  # noqa: E402
import mnist  # noqa: E402

BATCH = 64


class StepLog(distrib.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.losses, self.times, self._t = [], [], None

    def on_train_batch_begin(self, batch, logs=None):
        self._t = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self._t)
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


def run(policy, x, y, x_test, y_test, epochs, steps):
    distrib.mixed_precision.set_global_policy(policy)
    torch.manual_seed(0)
    model = distrib.Model(mnist.build_cnn_model())
    model.compile(optimizer=distrib.optimizers.RMSprop(learning_rate=1e-3),
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.log_every = 1
    log, per_epoch = StepLog(), []
    for epoch in range(epochs):
        model.fit(x, y, batch_size=BATCH, epochs=epoch + 1, initial_epoch=epoch, steps_per_epoch=steps,
                  shuffle=False, verbose=0, callbacks=[log])
        per_epoch.append(model.evaluate(x_test, y_test, batch_size=500, verbose=0, return_dict=True))
    distrib.mixed_precision.set_global_policy("float32")
    return log, per_epoch


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=70)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    (x, y), (x_test, y_test) = distrib.datasets.mnist.load_data()
    n = BATCH * args.steps
    x, y = (x[:n] / np.float32(255)), y[:n].astype(np.int64)
    x_test, y_test = (x_test[:2000] / np.float32(255)), y_test[:2000].astype(np.int64)
    results = {p: run(p, x, y, x_test, y_test, args.epochs, args.steps) for p in ("float32", "mixed_bfloat16")}

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for policy, (log, _) in results.items():
        ax.plot(range(1, len(log.losses) + 1), log.losses, label=policy)
    ax.set_xlabel("step")
    ax.set_ylabel("running training loss (epoch mean so far)")
    ax.set_title(f"TF tutorials' MNIST CNN, RMSprop 1e-3, batch {BATCH}: float32 vs mixed_bfloat16 (CPU)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "mixed_precision.png"), dpi=100)

    print("| policy | " + " | ".join(f"epoch {e + 1} train loss / test loss / test acc" for e in range(args.epochs))
          + " | median step time |")
    print("|---|" + "---|" * args.epochs + "---|")
    base = None
    for policy, (log, per_epoch) in results.items():
        ends = [log.losses[(e + 1) * args.steps - 1] for e in range(args.epochs)]
        cells = [f"{t:.4f} / {ev['loss']:.4f} / {ev['accuracy']:.4f}" for t, ev in zip(ends, per_epoch)]
        med = float(np.median(log.times[5:]))
        base = base or med
        print(f"| {policy} | " + " | ".join(cells) + f" | {med * 1000:.1f} ms ({med / base:.2f}x) |")


if __name__ == "__main__":
    main()
