"""Count the collectives and bytes each training step issues, beside DDP's.

For every system it starts N worker processes on 127.0.0.1 (free ports),
counts every ``torch.distributed`` collective each process issues (by name,
process group and payload bytes) and, at every step boundary, takes a
snapshot. A step's traffic is then split into

- **gradient**: the gradient all-reduce (distrib's asynchronous bucket
  all-reduces; DDP's buckets, counted through a communication hook), and
- **extra**: everything else the step issued (control messages, log and
  metric reductions, end-of-data agreement, preemption checks, ...),

and reported per step (median over the steady-state steps, and the mean
over all steps of the run, so work done every k steps shows up too).

Systems: ``ddp`` (a plain DDP loop), ``distrib_ctl`` (the TF custom-loop tutorial's loop:
``strategy.run`` + ``strategy.reduce`` every step), ``distrib_fit``
(``Model.fit`` with metrics, the progress bar and ``BackupAndRestore``, as
TF's multi-worker Keras tutorial).

Usage:
    python bench/bench_collectives.py                 # 2 and 8 workers, every system
    python bench/bench_collectives.py --workers 2 --json out.json
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
EPOCHS, STEPS, PER_WORKER_BATCH, FEATURES = 2, 20, 16, 32
SYSTEMS = ("ddp", "distrib_ctl", "distrib_fit")


# ------------------------------------------------------------ in the worker
class Counter:
    """Counts torch.distributed calls; `snapshot()` marks a step boundary."""

    def __init__(self) -> None:
        self.calls: Dict[str, int] = collections.Counter()
        self.bytes: Dict[str, int] = collections.Counter()
        self.steps: List[Dict] = []

    def add(self, kind: str, nbytes: int) -> None:
        self.calls[kind] += 1
        self.bytes[kind] += nbytes

    def snapshot(self) -> None:
        self.steps.append({"calls": dict(self.calls), "bytes": dict(self.bytes)})


def _nbytes(obj) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o) for o in obj)
    return 0


def install_counter() -> Counter:
    """Wrap the torch.distributed collectives so every call is counted."""
    import torch.distributed as dist

    counter = Counter()

    def wrap(name: str):
        original = getattr(dist, name)

        def counted(*args, **kwargs):
            group = kwargs.get("group")
            is_world = group is None or group is dist.group.WORLD
            # distrib's gradient buckets are the only asynchronous all-reduces on the data group
            gradient = name == "all_reduce" and kwargs.get("async_op") and is_world
            kind = "gradient" if gradient else f"{name}[{'data' if is_world else 'control'}]"
            counter.add(kind, _nbytes(args[0]) if args else 0)
            return original(*args, **kwargs)
        setattr(dist, name, counted)

    for name in ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                 "reduce_scatter_tensor", "barrier", "all_to_all", "gather", "scatter",
                 "all_gather_object", "broadcast_object_list"):
        if hasattr(dist, name):
            wrap(name)
    return counter


def _data(np):
    rng = np.random.default_rng(0)
    n = EPOCHS * STEPS * PER_WORKER_BATCH * 8
    x = rng.standard_normal((n, FEATURES)).astype(np.float32)
    y = (x @ rng.standard_normal((FEATURES, 4))).argmax(1).astype(np.int64)
    return x, y


def _model(torch):
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def run_ddp(counter: Counter) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x, y = (torch.from_numpy(a) for a in _data(np))
    model = torch.nn.parallel.DistributedDataParallel(_model(torch))

    def counted_allreduce(state, bucket):  # the wrapped all_reduce counts the bucket
        fut = dist.all_reduce(bucket.buffer().div_(world), async_op=True, group=state).get_future()
        return fut.then(lambda f: f.value()[0])
    counter.calls.clear()
    counter.bytes.clear()
    model.register_comm_hook(dist.group.WORLD, counted_allreduce)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(EPOCHS):
        for step in range(STEPS):
            lo = ((epoch * STEPS + step) * world + rank) * PER_WORKER_BATCH
            loss = loss_fn(model(x[lo:lo + PER_WORKER_BATCH]), y[lo:lo + PER_WORKER_BATCH])
            opt.zero_grad()
            loss.backward()
            opt.step()
            counter.snapshot()
            if step % 10 == 0:
                loss.item()  # what a DDP user logs: the local loss, no collective
    dist.barrier()  # after the last snapshot: tearing gloo down under a peer's last bucket can abort
    dist.destroy_process_group()


def _distrib_setup():
    import numpy as np
    import torch

    import distrib

    strategy = distrib.MultiWorkerMirroredStrategy()
    torch.manual_seed(0)
    x, y = _data(np)
    global_batch = PER_WORKER_BATCH * strategy.num_replicas_in_sync
    dataset = distrib.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
    return distrib, torch, strategy, dataset, global_batch


def run_distrib_ctl(counter: Counter) -> None:
    distrib, torch, strategy, dataset, global_batch = _distrib_setup()
    with strategy.scope():
        model = _model(torch)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    iterator = iter(strategy.experimental_distribute_dataset(dataset.repeat()))
    loss_obj = torch.nn.CrossEntropyLoss(reduction="none")

    def step_fn(inputs):
        xb, yb = inputs
        loss = distrib.nn.compute_average_loss(loss_obj(model(xb), yb), global_batch_size=global_batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    counter.calls.clear()
    counter.bytes.clear()
    for epoch in range(EPOCHS):
        total = 0.0
        for step in range(STEPS):
            # the TF custom-loop tutorial's loop: run the step, reduce its loss (a collective the program asks for)
            total += strategy.reduce(distrib.ReduceOp.SUM, strategy.run(step_fn, args=(next(iterator),)),
                                     axis=None).item()
            counter.snapshot()


def run_distrib_fit(counter: Counter, backup_dir: str) -> None:
    distrib, torch, strategy, dataset, global_batch = _distrib_setup()

    from distrib.training.trainer import Trainer

    # Snapshots are taken after each step's `strategy.run`, not from a callback: a callback of
    # the program's own with a batch hook makes fit agree `stop_training` after every step.
    train_one = Trainer._train_one

    def train_one_then_snapshot(self, batch, global_batch_size):
        train_one(self, batch, global_batch_size)
        counter.snapshot()
    Trainer._train_one = train_one_then_snapshot

    class Snapshot(distrib.callbacks.Callback):
        def on_train_end(self, logs=None):  # an epoch-level hook: fit keeps its per-step traffic
            pass

    with strategy.scope():
        model = distrib.Model(_model(torch))
        model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.1),
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    counter.calls.clear()
    counter.bytes.clear()
    model.fit(dataset.repeat(), epochs=EPOCHS, steps_per_epoch=STEPS, verbose=1,
              callbacks=[distrib.callbacks.BackupAndRestore(backup_dir), Snapshot()])


def worker_main(system: str, out: str, backup_dir: str) -> None:
    import torch

    torch.set_num_threads(1)
    counter = install_counter()
    if system == "ddp":
        run_ddp(counter)
    elif system == "distrib_ctl":
        run_distrib_ctl(counter)
    else:
        run_distrib_fit(counter, backup_dir)
    with open(out, "w") as f:
        json.dump(counter.steps, f)


# ------------------------------------------------------------ the runner
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_system(system: str, workers: int, timeout: float) -> List[Dict]:
    """Run one system on ``workers`` processes; the per-step snapshots of rank 0."""
    with tempfile.TemporaryDirectory() as tmp:
        ports = [_free_port() for _ in range(workers)]
        procs = []
        for rank in range(workers):
            env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
            if system == "ddp":
                env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(ports[0]), RANK=str(rank),
                           WORLD_SIZE=str(workers), LOCAL_RANK=str(rank))
            else:
                env["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                               "task": {"type": "worker", "index": rank}})
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "--worker", system, f"{tmp}/{rank}.json", f"{tmp}/backup"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        errors = []
        for rank, p in enumerate(procs):
            try:
                _, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise SystemExit(f"{system} with {workers} workers did not finish in {timeout:g}s")
            if p.returncode != 0:
                errors.append(f"rank {rank}: exit {p.returncode}: {err.strip().splitlines()[-1:]}")
        if errors:
            raise SystemExit(f"{system} with {workers} workers failed: {errors}")
        with open(f"{tmp}/0.json") as f:
            return json.load(f)


def per_step(snapshots: List[Dict]) -> Dict:
    """Per-step calls and bytes, gradient vs extra: steady-state median and whole-run mean."""
    rows = []
    previous = {"calls": {}, "bytes": {}}
    for snap in snapshots:
        row = {}
        for what in ("calls", "bytes"):
            diff = {k: v - previous[what].get(k, 0) for k, v in snap[what].items()}
            row[what] = {k: v for k, v in diff.items() if v}
        rows.append(row)
        previous = snap

    def split(row, what):
        grad = row[what].get("gradient", 0)
        return grad, sum(v for k, v in row[what].items() if k != "gradient")

    steady = rows[2:] if len(rows) > 4 else rows
    kinds = collections.Counter()
    for row in rows:
        for k, v in row["calls"].items():
            if k != "gradient":
                kinds[k] += v
    out = {"steps": len(rows), "extra_kinds_per_step": {k: round(v / len(rows), 3) for k, v in kinds.items()}}
    for what in ("calls", "bytes"):
        grads = [split(r, what)[0] for r in steady]
        extras = [split(r, what)[1] for r in steady]
        out[f"gradient_{what}_median"] = statistics.median(grads)
        out[f"extra_{what}_median"] = statistics.median(extras)
        out[f"extra_{what}_mean"] = round(sum(split(r, what)[1] for r in rows) / len(rows), 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if args.worker:
        worker_main(*args.worker)
        return
    results = []
    for n in args.workers:
        for system in args.systems:
            summary = per_step(run_system(system, n, args.timeout))
            results.append({"system": system, "workers": n, **summary})
            print(f"{system:12s} {n} workers: gradient {summary['gradient_calls_median']:g} calls "
                  f"{summary['gradient_bytes_median']:g} B/step; extra median {summary['extra_calls_median']:g} "
                  f"calls {summary['extra_bytes_median']:g} B, mean {summary['extra_calls_mean']:g} calls "
                  f"{summary['extra_bytes_mean']:g} B/step; {summary['extra_kinds_per_step']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
