"""Benchmark distrib against plain PyTorch, DDP and (optionally) TensorFlow on the TF tutorials' MNIST job.

    python bench/run.py                 # 5 interleaved repetitions of every system
    python bench/run.py --reps 3 --tf   # also TensorFlow MWMS (installs it into bench/.tf-venv)
    python bench/run.py --only ddp,distrib_mwms_ctl --reps 3

Each repetition runs every system once, in a rotated order, so slow drifts of
this noisy machine hit all systems alike. Every task is started directly with
Popen (no launcher for anyone), with one thread per worker. Results go to
bench/RESULTS.md and bench/results.png, raw numbers to bench/out/.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WARMUP_STEPS = 20

SYSTEMS = {  # name -> number of processes
    "torch_loop_1t": 1, "torch_loop_2t": 1, "ddp": 2,
    "distrib_1p_ctl": 1, "distrib_1p_fit": 1, "distrib_mwms_ctl": 2, "distrib_mwms_fit": 2,
    "distrib_mwms_ctl_bf16": 2, "distrib_mwms_ctl_fp16": 2,
    "ddp_malloc_tuned": 2,  # DDP with distrib's allocator settings, as env vars: where the gain comes from
}
CUDA_SYSTEMS = {"torch_loop_cuda": 1, "distrib_fit_cuda": 1}  # run only where torch sees a GPU


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(system: str, outdir: Path, python: str) -> List[subprocess.Popen]:
    n = SYSTEMS.get(system, 2)
    script = str(HERE / ("tf_workload.py" if system.startswith("tf_") else "workloads.py"))
    ports = [free_port() for _ in range(n)]
    procs = []
    for rank in range(n):
        env = dict(os.environ, OMP_NUM_THREADS="2" if system == "torch_loop_2t" else "1",
                   PYTHONUNBUFFERED="1")
        env.pop("TF_CONFIG", None)
        if system == "ddp_malloc_tuned":
            env.update(MALLOC_MMAP_THRESHOLD_=str(32 * 1024 * 1024), MALLOC_TRIM_THRESHOLD_=str(1 << 30))
        if system in ("ddp", "ddp_malloc_tuned"):
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(ports[0]), RANK=str(rank),
                       WORLD_SIZE=str(n), LOCAL_RANK=str(rank))
        elif n > 1:
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                           "task": {"type": "worker", "index": rank}})
        procs.append(subprocess.Popen([python, script, system, str(outdir / f"{system}-{rank}.json")],
                                      env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True))
    return procs


def run_once(system: str, python: str) -> Dict:
    with tempfile.TemporaryDirectory() as tmp:
        outdir = Path(tmp)
        start = time.time()
        procs = launch(system, outdir, python)
        errors = [p.communicate(timeout=600)[1] for p in procs]
        for p, err in zip(procs, errors):
            if p.returncode != 0:
                raise RuntimeError(f"{system} failed ({p.returncode}):\n{err[-3000:]}")
        reports = [json.loads(f.read_text()) for f in sorted(outdir.glob("*.json"))]
    times = reports[0]["step_times"]
    steady = (len(times) - 1 - WARMUP_STEPS) * reports[0]["examples_per_step"] / (times[-1] - times[WARMUP_STEPS])
    return {
        "examples_per_s": steady,
        "launch_to_first_step_s": max(r["step_times"][0] for r in reports) - start,
        "last_step_to_return_s": max(r["returned"] - r["step_times"][-1] for r in reports),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in reports),
        "first_loss": reports[0]["first_loss"], "last_loss": reports[0]["last_loss"],
        "loss_curve": reports[0].get("losses", []),
    }


def summarize(samples: List[Dict]) -> Dict:
    out = {}
    for key in samples[0]:
        if key == "loss_curve":
            out[key] = samples[0][key]  # deterministic: same seeds, same data order in every run
            continue
        values = [s[key] for s in samples]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tf", action="store_true", help="also run TensorFlow MWMS (own venv, bench/.tf-venv)")
    ap.add_argument("--only", default="", help="comma-separated systems")
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = ap.parse_args()
    import torch

    if torch.cuda.is_available():
        SYSTEMS.update(CUDA_SYSTEMS)
    else:
        print("bench: CUDA systems skipped (torch sees no GPU here): " + ", ".join(CUDA_SYSTEMS), flush=True)
    systems = [s for s in SYSTEMS if not args.only or s in args.only.split(",")]
    pythons = {s: sys.executable for s in systems}
    if args.tf:
        from tf_peer import ensure_tf_venv  # noqa: E402  (bench/ is on sys.path when run as a script)

        tf_python = ensure_tf_venv()
        for name in ("tf_mwms_keras_legacy",):
            if not args.only or name in args.only.split(","):
                systems.append(name)
                pythons[name] = tf_python
    samples: Dict[str, List[Dict]] = {s: [] for s in systems}
    failures: List[str] = []
    for rep in range(args.reps):
        order = systems[rep % len(systems):] + systems[:rep % len(systems)]
        for system in order:
            try:
                result = run_once(system, pythons[system])
            except RuntimeError as exc:  # recorded and reported, not hidden
                failures.append(f"rep {rep + 1} {system}: {str(exc).strip().splitlines()[-1]}")
                print(f"rep {rep + 1}/{args.reps} {system:24s} FAILED: {failures[-1]}", flush=True)
                continue
            samples[system].append(result)
            print(f"rep {rep + 1}/{args.reps} {system:24s} {result['examples_per_s']:8.0f} ex/s  "
                  f"first step {result['launch_to_first_step_s']:.2f}s  return {result['last_step_to_return_s']:.2f}s  "
                  f"rss {result['peak_rss_mb']:.0f} MB  loss {result['first_loss']:.3f}->{result['last_loss']:.3f}",
                  flush=True)
    summary = {s: summarize(v) for s, v in samples.items() if v}
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "summary.json").write_text(json.dumps({"samples": samples, "summary": summary}, indent=1))
    from report import write_report

    text = write_report(summary, args, HERE, write=not args.no_write, failures=failures)
    print(text)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
