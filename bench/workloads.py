"""The TF tutorials' MNIST job, as each benchmarked system runs it. Run by `bench/run.py`, one process per task.

Every workload trains the tutorial CNN (2,770,634 parameters) with RMSprop on
synthetic MNIST-shaped data whose labels are a fixed function of the pixels
(so learning is visible: the loss must fall), records the wall-clock time
after every step, and writes a JSON report:
``{"system", "rank", "step_times", "returned", "examples_per_step", "peak_rss_mb", "first_loss", "last_loss"}``.

Usage: python bench/workloads.py SYSTEM OUT.json   (TF_CONFIG / RANK set by the runner)
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time

EPOCHS, STEPS, PER_WORKER_BATCH = 3, 70, 64
NUM_EXAMPLES = 60000


def synthetic_mnist(np):
    """60,000 28x28 images in [0, 1] and labels = argmax of a fixed random projection."""
    rng = np.random.default_rng(0)
    x = rng.random((NUM_EXAMPLES, 28, 28), dtype=np.float32)
    x *= rng.random((NUM_EXAMPLES, 1, 1), dtype=np.float32)  # vary contrast
    w = rng.standard_normal((28 * 28, 10)).astype(np.float32)
    y = (x.reshape(NUM_EXAMPLES, -1) @ w).argmax(1).astype(np.int64)
    return x, y


def cnn(torch):
    return torch.nn.Sequential(
        torch.nn.Unflatten(1, (1, 28)), torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(26 * 26 * 32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _report(out, system, rank, step_times, examples_per_step, losses):
    with open(out, "w") as f:
        json.dump({"system": system, "rank": rank, "step_times": step_times, "returned": time.time(),
                   "examples_per_step": examples_per_step, "peak_rss_mb": _peak_rss_mb(),
                   "first_loss": losses[0], "last_loss": losses[-1], "losses": losses}, f)


# ---------------------------------------------------------------- PyTorch
def torch_loop(out, threads, device="cpu"):
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x, y = (torch.from_numpy(a).to(device) for a in synthetic_mnist(np))
    model = cnn(torch).to(device)
    opt = torch.optim.RMSprop(model.parameters(), lr=0.001, alpha=0.9, eps=1e-7)
    loss_fn = torch.nn.CrossEntropyLoss()
    batch = PER_WORKER_BATCH * 2
    g = torch.Generator().manual_seed(0)
    times, losses = [], []
    for epoch in range(EPOCHS):
        order = torch.randperm(NUM_EXAMPLES, generator=g).to(device)
        for step in range(STEPS):
            idx = order[step * batch:(step + 1) * batch]
            loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.time())
            if step % 35 == 0:
                losses.append(loss.item())
    losses.append(loss.item())
    _report(out, "torch_loop_cuda" if device != "cpu" else f"torch_loop_{threads}t", 0, times, batch, losses)


def ddp(out, name="ddp"):
    import numpy as np
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x, y = (torch.from_numpy(a) for a in synthetic_mnist(np))
    model = torch.nn.parallel.DistributedDataParallel(cnn(torch))
    opt = torch.optim.RMSprop(model.parameters(), lr=0.001, alpha=0.9, eps=1e-7)
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(0)
    times, losses = [], []
    for epoch in range(EPOCHS):
        order = torch.randperm(NUM_EXAMPLES, generator=g)[rank::world]
        for step in range(STEPS):
            idx = order[step * PER_WORKER_BATCH:(step + 1) * PER_WORKER_BATCH]
            loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.time())
            if step % 35 == 0:
                losses.append(loss.item())
    losses.append(loss.item())
    _report(out, name, rank, times, PER_WORKER_BATCH * world, losses)
    dist.destroy_process_group()


# ---------------------------------------------------------------- distrib
def _distrib_setup(multi_worker, device="cpu"):
    import numpy as np
    import torch

    import distrib

    torch.set_num_threads(1)
    compression = os.environ.get("BENCH_COMPRESSION") or None
    options = distrib.CommunicationOptions(gradient_compression=compression)
    strategy = (distrib.MultiWorkerMirroredStrategy(communication_options=options) if multi_worker
                else distrib.OneDeviceStrategy(device))
    torch.manual_seed(0)
    x, y = synthetic_mnist(np)
    global_batch = PER_WORKER_BATCH * 2
    dataset = distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(NUM_EXAMPLES, seed=0).repeat().batch(global_batch)
    return distrib, torch, strategy, dataset, global_batch


def distrib_ctl(out, multi_worker):
    distrib, torch, strategy, dataset, global_batch = _distrib_setup(multi_worker)
    with strategy.scope():
        model = cnn(torch)
        opt = torch.optim.RMSprop(model.parameters(), lr=0.001, alpha=0.9, eps=1e-7)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)
    loss_obj = torch.nn.CrossEntropyLoss(reduction="none")

    def step_fn(inputs):
        xb, yb = inputs
        loss = distrib.nn.compute_average_loss(loss_obj(model(xb), yb), global_batch_size=global_batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    iterator = iter(dist_dataset)
    times, losses = [], []
    for epoch in range(EPOCHS):
        for step in range(STEPS):
            per_replica = strategy.run(step_fn, args=(next(iterator),))
            times.append(time.time())
            if step % 10 == 0:
                losses.append(strategy.reduce(distrib.ReduceOp.SUM, per_replica, axis=None).item())
    losses.append(strategy.reduce(distrib.ReduceOp.SUM, per_replica, axis=None).item())
    name = "distrib_mwms_ctl" if multi_worker else "distrib_1p_ctl"
    if os.environ.get("BENCH_COMPRESSION"):
        name += "_" + os.environ["BENCH_COMPRESSION"]
    _report(out, name, strategy.replica_id, times, global_batch, losses)


def distrib_fit(out, multi_worker, device="cpu"):
    distrib, torch, strategy, dataset, global_batch = _distrib_setup(multi_worker, device)
    times = []

    class StepClock(distrib.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            times.append(time.time())

    with strategy.scope():
        model = distrib.Model(cnn(torch))
        model.compile(optimizer=distrib.optimizers.RMSprop(learning_rate=0.001),
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    history = model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0, callbacks=[StepClock()])
    losses = history.history["loss"]
    name = "distrib_mwms_fit" if multi_worker else "distrib_1p_fit"
    if device != "cpu":
        name = "distrib_fit_cuda"
    _report(out, name, strategy.replica_id, times, global_batch, losses)  # every epoch's mean loss


def main(argv):
    system, out = argv[1], argv[2]
    if system == "torch_loop_1t":
        torch_loop(out, 1)
    elif system == "torch_loop_2t":
        torch_loop(out, 2)
    elif system in ("ddp", "ddp_malloc_tuned"):
        ddp(out, system)
    elif system == "distrib_1p_ctl":
        distrib_ctl(out, multi_worker=False)
    elif system == "distrib_mwms_ctl":
        distrib_ctl(out, multi_worker=True)
    elif system in ("distrib_mwms_ctl_bf16", "distrib_mwms_ctl_fp16"):
        os.environ["BENCH_COMPRESSION"] = system.rsplit("_", 1)[1]
        distrib_ctl(out, multi_worker=True)
    elif system == "torch_loop_cuda":
        torch_loop(out, 1, device="cuda")
    elif system == "distrib_fit_cuda":
        distrib_fit(out, multi_worker=False, device="cuda")
    elif system == "distrib_1p_fit":
        distrib_fit(out, multi_worker=False)
    elif system == "distrib_mwms_fit":
        distrib_fit(out, multi_worker=True)
    else:
        raise SystemExit(f"unknown system {system!r}")


if __name__ == "__main__":
    main(sys.argv)
