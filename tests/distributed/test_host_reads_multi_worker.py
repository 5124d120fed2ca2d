"""No host read inside a step on 2 real workers: gradients, the preemption flag and the loss stay on the device.

Each worker counts the host reads (`distrib.testing.host_reads.HostReads`)
between each ``on_train_batch_begin`` and ``on_train_batch_end`` of a `fit`
with `BackupAndRestore` (whose preemption flag rides in the gradient
all-reduce), and around each `strategy.run` of a custom step. Before this
was fixed, every step read each gradient bucket's "had a gradient" flags and
the preemption flag on the host: on a GPU, one stall per bucket per step.
"""
from __future__ import annotations

import tempfile

import pytest
import torch

from distrib.testing import run_cluster

pytestmark = pytest.mark.timeout(180)


def host_reads_per_step(backup_dir):
    import distrib
    from distrib.testing.host_reads import HostReads

    torch.set_num_threads(1)
    strategy = distrib.MultiWorkerMirroredStrategy()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(384, 8, generator=gen)
    y = x[:, :3].argmax(1)
    with strategy.scope():
        model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)))
        model.compile(optimizer="adam", metrics=["accuracy"],
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.log_every = 10_000
    fit_reads = []

    class Count(distrib.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.counter = HostReads()
            self.counter.__enter__()

        def on_train_batch_end(self, batch, logs=None):
            self.counter.__exit__(None, None, None)
            fit_reads.append(self.counter.sites())

    # Count first: BackupAndRestore's own batch-end check (a callback asking) comes after it.
    model.fit(x, y, batch_size=32, epochs=1, verbose=0,
              callbacks=[Count(), distrib.callbacks.BackupAndRestore(backup_dir)])

    # Every parameter the strategy tracks gets a gradient (a parameter without one on some replica
    # makes every replica read the bucket's "had a gradient" flags: only the sum says who had one).
    net = model.module
    with strategy.scope():
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
    batches = iter(strategy.experimental_distribute_dataset(
        distrib.data.Dataset.from_tensor_slices((x, y)).batch(32)))
    loss_fn = torch.nn.CrossEntropyLoss(reduction="none")

    def step(inputs):
        xb, yb = inputs
        loss = distrib.nn.compute_average_loss(loss_fn(net(xb), yb), global_batch_size=32)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    run_reads = []
    strategy.run(step, (next(batches),))  # the first step broadcasts and builds the buckets
    for _ in range(4):
        with HostReads() as reads:
            strategy.run(step, (next(batches),))
        run_reads.append(reads.sites())
    return {"fit": fit_reads, "run": run_reads}


def test_no_step_of_fit_or_of_strategy_run_reads_a_value_on_the_host_on_two_workers():
    with tempfile.TemporaryDirectory() as backup_dir:
        results = run_cluster(host_reads_per_step, num_workers=2, args=(backup_dir,), timeout=150)
    for result in results:
        assert len(result["fit"]) == 12
        assert [sites for sites in result["fit"][1:-1] if sites] == []  # first: builds; last: logs
        assert result["run"] == [[], [], [], []]
