"""Checkpoints of a large model: peak memory of a save and a restore, and what a save costs a step.

Part 1, memory. A model of ``--gib`` GiB of float32 weights is saved and then
restored into a second model of the same shape, each operation in a fresh
child process that reports the growth of its peak resident memory
(``VmHWM``, reset with ``/proc/self/clear_refs`` once the model is built) over
the model it holds. The same child then runs again with its address space
capped (``RLIMIT_AS``, what ``prlimit --as`` sets) at what it maps once the
model is built plus a quarter of the state -- so the state is more than half
of all the memory the process is allowed -- and reports whether the operation
still succeeds. Methods:

* ``distrib``: ``Checkpoint(model=m).write(path)`` / ``.restore(path)`` (this tree);
* ``distrib before`` (``--before REV``): the same calls with the ``src/`` of git revision REV;
* ``torch.save`` / ``torch.load(mmap=True)`` + ``load_state_dict``;
* ``torch.distributed.checkpoint``: ``dcp.save`` / ``dcp.load`` (one process, no process group).

Part 2, step time. A plain PyTorch loop (an MLP with Adam, ``--step-mib`` MiB
of weights) saves model and optimizer every ``--every`` steps through a
``CheckpointManager`` (blocking), through the same with
``CheckpointOptions(enable_async=True)`` (background), and through
``torch.distributed.checkpoint.async_save`` (one save in flight, as distrib
does), interleaved round by round with a run that does not save. Reported:
each run's median step, and the time its steps spent above that median per
save (the save call, the steps a background write slowed, the final wait), as
a multiple of the blocking save's; the run without saves shows what noise alone gives.

Run: python bench/bench_checkpoint_memory.py [--gib 1.5] [--before a8a4ceb] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

_GIB = 1 << 30
_HERE = os.path.dirname(os.path.abspath(__file__))
_SRC = os.path.join(os.path.dirname(_HERE), "src")


# ------------------------------------------------------------------ the child
def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _model(gib: float, seed: int):
    import torch

    torch.manual_seed(seed)
    layers = max(1, round(gib * _GIB / (4096 * 4096 * 4)))
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096, bias=False) for _ in range(layers)])
    return model, sum(p.numel() * p.element_size() for p in model.parameters())


def _operate(method: str, op: str, model, path: str) -> None:
    import torch

    if method.startswith("distrib"):
        from distrib.checkpoint import Checkpoint

        checkpoint = Checkpoint(model=model)
        if op == "save":
            checkpoint.write(path)
        else:
            checkpoint.restore(path).assert_consumed()
    elif method == "torch.save":
        if op == "save":
            torch.save(model.state_dict(), path)
        else:
            model.load_state_dict(torch.load(path, mmap=True, weights_only=True))
    elif method == "dcp":
        import torch.distributed.checkpoint as dcp

        state = {"model": model.state_dict()}
        if op == "save":
            dcp.save(state, checkpoint_id=path)
        else:
            dcp.load(state, checkpoint_id=path)
            model.load_state_dict(state["model"])
    else:
        raise SystemExit(f"unknown method {method!r}")


def child(method: str, op: str, path: str, gib: float, capped: bool) -> None:
    """Build the model, then save it to or restore it from ``path``; print ``size base peak ok seconds allowed``."""
    import warnings

    warnings.simplefilter("ignore")
    model, size = _model(gib, seed=1 if op == "save" else 2)
    _operate(method, "save", _model(0.001, 0)[0], path + ".warm")  # import and warm the method's code
    import gc

    gc.collect()
    base = _status("VmRSS")
    allowed = 0
    if capped:
        allowed = _status("VmSize") + size // 4
        resource.setrlimit(resource.RLIMIT_AS, (allowed, allowed))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak starts again from here
    ok = "ok"
    start = time.perf_counter()
    try:
        _operate(method, op, model, path)
    except MemoryError:
        ok = "MemoryError"
    except BaseException as exc:  # an allocation failure surfaces in other types too (dcp: a BaseException)
        ok = type(exc).__name__
    print(size, base, _status("VmHWM"), ok, time.perf_counter() - start, allowed, flush=True)


def _run_child(method: str, op: str, path: str, gib: float, capped: bool, pythonpath: str) -> Dict[str, object]:
    env = {**os.environ, "PYTHONPATH": pythonpath, "MALLOC_ARENA_MAX": "1", "OMP_NUM_THREADS": "2"}
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", method, op, path, str(gib),
                           "capped" if capped else "free"], env=env, capture_output=True, text=True, timeout=900)
    last = proc.stdout.strip().splitlines()[-1].split() if proc.stdout.strip() else []
    if len(last) != 6:  # e.g. safetensors' Rust allocator aborts the process
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        return {"ok": f"process died ({how})", "extra": None}
    size, base, peak, ok, seconds = int(last[0]), int(last[1]), int(last[2]), last[3], float(last[4])
    return {"ok": ok, "extra": (peak - base) / size, "size": size, "seconds": seconds, "allowed": int(last[5])}


def _before_src(rev: str) -> str:
    out = tempfile.mkdtemp(prefix="bench-ckpt-before-")
    root = os.path.dirname(_HERE)
    archive = subprocess.run(["git", "-C", root, "archive", rev, "src"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", out], input=archive, check=True)
    return os.path.join(out, "src")


def memory(gib: float, before: Optional[str]) -> None:
    methods = [("distrib", _SRC)]
    if before:
        methods.append((f"distrib before ({before})", _before_src(before)))
    methods += [("torch.save", _SRC), ("dcp", _SRC)]
    print(f"\n## Peak memory: a {gib:g} GiB model saved, then restored into another "
          f"(extra peak RSS / state size; capped: RLIMIT_AS = mapped + state/4)\n")
    print("| method | save: extra / state | save (s) | save, capped | restore: extra / state | restore (s) "
          "| restore, capped |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    shares: List[float] = []
    for method, src in methods:
        work = tempfile.mkdtemp(prefix="bench-ckpt-")
        try:
            path = os.path.join(work, "ckpt-1")
            cells = []
            for op in ("save", "restore"):
                free = _run_child(method, op, path, gib, False, src)
                capped = _run_child(method, op, path + ("-capped" if op == "save" else ""), gib, True, src)
                if capped.get("allowed"):
                    shares.append(capped["size"] / capped["allowed"])
                if free["extra"] is None:
                    cells += [free["ok"], "-", capped["ok"]]
                else:
                    cells += [f"{free['extra']:.2f}x", f"{free['seconds']:.1f}", capped["ok"]]
            print(f"| {method} | " + " | ".join(cells) + " |", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if shares:
        print(f"\nUnder the cap the state is {min(shares):.0%}-{max(shares):.0%} of the address space the "
              f"process may use.")


# ------------------------------------------------------------------ step time
def _train(mode: str, steps: int, every: int, mib: float, work: str) -> List[float]:
    """The wall time of each step (a saving step includes its save call; the last, the final wait)."""
    import torch

    import distrib
    from distrib.checkpoint import Checkpoint, CheckpointManager

    torch.manual_seed(0)
    width = max(64, int((mib * (1 << 20) / 4 / 2) ** 0.5))
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(64, width)
    manager = CheckpointManager(Checkpoint(model=model, optimizer=opt), os.path.join(work, mode), max_to_keep=2)
    background = distrib.train.CheckpointOptions(enable_async=True)
    pending = None
    times = []
    for step in range(1, steps + 1):
        start = time.perf_counter()
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if step % every == 0:
            if mode == "blocking":
                manager.save()
            elif mode == "background":
                manager.save(options=background)
            elif mode == "dcp async_save":
                import torch.distributed.checkpoint as dcp

                if pending is not None:
                    pending.result()  # one in flight, as distrib does
                pending = dcp.async_save({"model": model.state_dict(), "optim": opt.state_dict()},
                                         checkpoint_id=os.path.join(work, mode, f"step-{step}"))
        if step == steps:  # the end of training waits for the last write
            manager.sync()
            if pending is not None:
                pending.result()
        times.append(time.perf_counter() - start)
    return times


def step_time(rounds: int, steps: int, every: int, mib: float) -> None:
    """What saving adds to a run: the steps' time above the run's own median step, per save.

    Measured against each run's own median step rather than against another
    run, so that the load other processes put on a shared machine, which
    moves whole runs, cancels out; a write that slows the steps after the
    save shows as those steps' excess.
    """
    import warnings

    warnings.simplefilter("ignore")
    modes = ["none", "blocking", "background", "dcp async_save"]
    step_ms: Dict[str, List[float]] = {m: [] for m in modes}
    costs: Dict[str, List[float]] = {m: [] for m in modes}
    stalls: Dict[str, List[float]] = {m: [] for m in modes}
    saves = steps // every
    for round_ in range(rounds):
        work = tempfile.mkdtemp(prefix="bench-ckpt-steps-")
        try:
            for m in modes[round_ % len(modes):] + modes[:round_ % len(modes)]:  # a new order each round
                times = _train(m, steps, every, mib, work)[every:]  # the first interval warms up
                median = statistics.median(times)
                step_ms[m].append(median * 1000)
                costs[m].append(sum(t - median for t in times) / max(1, saves - 1))
                saving = times[every - 1::every][:-1]  # the steps that called save (the last also waits)
                stalls[m].append(statistics.median(t - median for t in saving))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n## What a save costs the training loop ({steps} steps, a save every {every}, "
          f"{mib:g} MiB of weights + Adam; medians of {rounds} rounds)\n")
    print("| | median step (ms) | the saving step's stall (ms) | / blocking | all steps above the median, "
          "per save (ms) | / blocking |")
    print("|---|---:|---:|---:|---:|---:|")
    blocking, blocking_stall = statistics.median(costs["blocking"]), statistics.median(stalls["blocking"])
    for m in modes:
        cost, stall = statistics.median(costs[m]), statistics.median(stalls[m])
        label = "no save" if m == "none" else m
        ratios = ("-", "-") if m == "none" else (f"{stall / blocking_stall:.2f}x", f"{cost / blocking:.2f}x")
        print(f"| {label} | {statistics.median(step_ms[m]):.0f} | {stall * 1000:.0f} | {ratios[0]} | "
              f"{cost * 1000:.0f} | {ratios[1]} |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        method, op, path, gib, capped = sys.argv[2:7]
        child(method, op, path, float(gib), capped == "capped")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, default=1.5, help="size of the model's state (part 1)")
    parser.add_argument("--before", default=None, help="a git revision whose distrib to measure too")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--step-mib", type=float, default=256.0, help="weights of the part-2 model")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-steps", action="store_true")
    args = parser.parse_args()
    if not args.skip_memory:
        memory(args.gib, args.before)
    if not args.skip_steps:
        step_time(args.rounds, args.steps, args.every, args.step_mib)


if __name__ == "__main__":
    main()
