"""Soak an elastic job: SIGKILL a random task every 30-90 s, then compare with an uninterrupted run.

Run through ``scripts/soak.sh`` (docs/elastic.md, "Soak"). Settings come from
the environment: SOAK_MINUTES (length of the killing phase, default 60),
SOAK_SEED (the kill schedule's RNG seed, default 0), SOAK_OUT (where the logs
and ``resources.csv`` go, default a new temporary directory), SOAK_STEP_SECONDS
(the job's step pace, default 0.25), SOAK_SAMPLE_SECONDS (resource samples,
default 10), SOAK_MIN_GAP / SOAK_MAX_GAP (seconds between kills, 30 and 90).
Exit status 0 only when the job ended well and every task's final weights equal
the uninterrupted run's bit for bit.
"""
from __future__ import annotations

import csv
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "scripts", "soak_job.py")
WORKERS = 2
SAVE_FREQ = 50
#: No kill in the job's last steps: a replacement must have a running job to join.
LAST_STEPS = 100


def _env(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def _launch(out: str, steps: int, step_seconds: float, elastic: bool, timeout: int) -> subprocess.Popen:
    os.makedirs(out, exist_ok=True)
    cmd = [sys.executable, "-m", "distrib", "launch", "--workers", str(WORKERS), "--grace-seconds", "5",
           "--timeout", str(timeout), "--output-from", "all"]
    if elastic:
        cmd += ["--elastic", "--max-restarts", "100000"]
    cmd += [JOB, out, str(steps), str(step_seconds), str(SAVE_FREQ)]
    log = open(os.path.join(out, "launcher.out"), "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def _task_pid(out: str, task: int) -> Optional[int]:
    try:
        with open(os.path.join(out, f"pid-{task}")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _last_step(out: str, task: int) -> int:
    try:
        with open(os.path.join(out, f"steps-{task}.txt"), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 200))
            lines = f.read().splitlines()[1:] or [b""]
        return int(lines[-1].split()[0]) if lines else -1
    except (OSError, ValueError, IndexError):
        return -1


def _sample(launcher: psutil.Process, out: str, elapsed: float, kills: int, writer) -> None:
    roles = {_task_pid(out, t): f"worker-{t}" for t in range(WORKERS)}
    try:
        procs = [(launcher, "launcher")] + [(p, roles.get(p.pid, "helper")) for p in launcher.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc, role in procs:
        try:
            with proc.oneshot():
                row = [f"{elapsed:.1f}", kills, len(procs), proc.pid, role, proc.num_fds(), proc.memory_info().rss,
                       f"{proc.create_time():.1f}"]
        except psutil.Error:
            continue
        writer.writerow(row)


def _slope(points: List[Tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 2:
        return float("nan")
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 3600.0 * sum((t - mt) * (v - mv) for t, v in points) / var if var else float("nan")


def summarize(csv_path: str, warmup: float, end: float) -> List[str]:
    """Slopes per hour from WARMUP to END seconds: the launcher, the tasks together, the longest-lived task process.

    The tasks' sums count only the samples where every task was up (not between a kill and its replacement).
    """
    with open(csv_path) as f:
        rows = [r for r in csv.DictReader(f) if warmup <= float(r["elapsed_s"]) <= end]
    if not rows:
        return ["no resource samples after the warm-up"]
    by_time: Dict[float, List[dict]] = {}
    for r in rows:
        by_time.setdefault(float(r["elapsed_s"]), []).append(r)
    launcher = [(t, rs_) for t, rs_ in by_time.items() for rs_ in rs_ if rs_["role"] == "launcher"]
    tasks = {t: [r for r in rs_ if r["role"].startswith("worker")] for t, rs_ in by_time.items()}
    tasks = {t: v for t, v in tasks.items() if len({r["role"] for r in v}) == WORKERS}
    lives: Dict[str, List[dict]] = {}
    for r in rows:
        if r["role"].startswith("worker"):
            lives.setdefault(r["pid"], []).append(r)
    longest = max(lives.values(), key=lambda v: float(v[-1]["elapsed_s"]) - float(v[0]["elapsed_s"]), default=[])
    span = float(longest[-1]["elapsed_s"]) - float(longest[0]["elapsed_s"]) if longest else 0.0
    lines = [f"samples: {len(by_time)} (after the first {warmup:.0f} s), processes per sample "
             f"min {min(len(v) for v in by_time.values())} max {max(len(v) for v in by_time.values())}"]

    def fmt(name: str, pts: List[Tuple[float, float]], unit: float, label: str) -> str:
        values = [v for _, v in pts]
        return (f"{name}: {label} {min(values) / unit:.1f}..{max(values) / unit:.1f}, "
                f"slope {_slope([(t, v / unit) for t, v in pts]):+.2f}/h")

    mb = 2 ** 20
    lines.append(fmt("launcher fds", [(t, float(r["fds"])) for t, r in launcher], 1, "range"))
    lines.append(fmt("launcher RSS", [(t, float(r["rss_bytes"])) for t, r in launcher], mb, "MiB"))
    lines.append(fmt("all processes", [(t, float(len(v))) for t, v in by_time.items()], 1, "count"))
    lines.append(fmt("tasks' fds (sum)", [(t, float(sum(int(r["fds"]) for r in v))) for t, v in tasks.items() if v],
                     1, "range"))
    lines.append(fmt("tasks' RSS (sum)", [(t, float(sum(int(r["rss_bytes"]) for r in v)))
                                          for t, v in tasks.items() if v], mb, "MiB"))
    if longest:
        role = longest[0]["role"]
        lines.append(fmt(f"longest-lived task process ({role} pid {longest[0]['pid']}, {span / 60:.0f} min) fds",
                         [(float(r["elapsed_s"]), float(r["fds"])) for r in longest], 1, "range"))
        lines.append(fmt(f"longest-lived task process ({role} pid {longest[0]['pid']}) RSS",
                         [(float(r["elapsed_s"]), float(r["rss_bytes"])) for r in longest], mb, "MiB"))
    return lines


def _finals(out: str):
    from distrib.checkpoint.files.format import load_state
    return [load_state(os.path.join(out, f"final-{t}.safetensors")) for t in range(WORKERS)]


def _equal(a, b) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and a[k].equal(b[k]) for k in a)


def main() -> int:
    minutes = _env("SOAK_MINUTES", 60)
    seed = int(_env("SOAK_SEED", 0))
    step_seconds = _env("SOAK_STEP_SECONDS", 0.25)
    sample_every = _env("SOAK_SAMPLE_SECONDS", 10)
    gaps = (_env("SOAK_MIN_GAP", 30), _env("SOAK_MAX_GAP", 90))
    root = os.environ.get("SOAK_OUT") or tempfile.mkdtemp(prefix="distrib-soak-")
    os.makedirs(root, exist_ok=True)
    # recoveries take time too (about 10 s each): 90% of the minutes in steps keeps the whole run near MINUTES
    steps = max(100, int(0.9 * minutes * 60 / step_seconds))
    timeout = int(minutes * 60 * 3 + 900)
    print(f"soak: {minutes:g} min of kills (seed {seed}), {steps} steps at >= {step_seconds:g} s, output in {root}",
          flush=True)

    ref_out = os.path.join(root, "reference")
    ref = _launch(ref_out, steps, 0.0, elastic=False, timeout=timeout)
    if ref.wait() != 0:
        print(f"soak: the uninterrupted run failed (exit {ref.returncode}); see {ref_out}/launcher.out")
        return 1
    print("soak: uninterrupted run done", flush=True)

    out = os.path.join(root, "soak")
    rng = random.Random(seed)
    job = _launch(out, steps, step_seconds, elastic=True, timeout=timeout)
    launcher = psutil.Process(job.pid)
    start = time.monotonic()
    stop_killing = start + minutes * 60
    next_kill = start + rng.uniform(*gaps)
    victim = rng.randrange(WORKERS)
    next_sample = start
    kills: List[Tuple[float, int, int, int]] = []
    kill_end: Optional[float] = None
    with open(os.path.join(root, "resources.csv"), "w", newline="") as f, \
            open(os.path.join(root, "kills.csv"), "w", newline="") as k:
        writer, kill_log = csv.writer(f), csv.writer(k)
        writer.writerow(["elapsed_s", "kills", "processes", "pid", "role", "fds", "rss_bytes", "created"])
        kill_log.writerow(["elapsed_s", "task", "pid", "step"])
        while job.poll() is None:
            now = time.monotonic()
            if now >= next_sample:
                _sample(launcher, out, now - start, len(kills), writer)
                f.flush()
                next_sample += sample_every
            killing = now < stop_killing and max(_last_step(out, t) for t in range(WORKERS)) < steps - LAST_STEPS
            if not killing and kill_end is None:
                kill_end = now - start
            if now >= next_kill and killing:
                pid = _task_pid(out, victim)
                try:
                    alive = pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                except psutil.NoSuchProcess:
                    alive = False
                if alive:  # else a replacement is still starting: try again in a moment
                    os.kill(pid, 9)
                    kills.append((now - start, victim, pid, _last_step(out, victim)))
                    kill_log.writerow([f"{now - start:.1f}", victim, pid, kills[-1][3]])
                    k.flush()
                    print(f"soak: kill {len(kills)} at {(now - start) / 60:.1f} min: worker {victim} (pid {pid}) "
                          f"after step {kills[-1][3]}", flush=True)
                    next_kill = now + rng.uniform(*gaps)
                    victim = rng.randrange(WORKERS)
            time.sleep(0.5)
    elapsed = time.monotonic() - start
    print(f"soak: the job ended with exit status {job.returncode} after {elapsed / 60:.1f} min; "
          f"{len(kills)} kills ({sum(1 for _, t, _, _ in kills if t == 0)} of the chief)", flush=True)
    identical = False
    if job.returncode == 0:
        try:
            reference, finals = _finals(ref_out)[0], _finals(out)
            identical = all(_equal(reference, w) for w in finals)
        except (OSError, ValueError) as e:
            print(f"soak: cannot read the final weights: {e}")
    print(f"soak: final weights {'bit-identical to' if identical else 'DIFFER from'} the uninterrupted run's")
    kill_end = elapsed if kill_end is None else kill_end
    print(f"soak: kills spanned {kill_end / 60:.1f} min; resource slopes over the samples from "
          f"{min(120.0, kill_end / 4):.0f} s to the last kill phase sample")
    for line in summarize(os.path.join(root, "resources.csv"), min(120.0, kill_end / 4), kill_end):
        print(f"soak: {line}")
    print(f"soak: kills survived: {len(kills) if job.returncode == 0 and identical else 0} of {len(kills)}; "
          f"CSV: {root}/resources.csv, kills: {root}/kills.csv, logs: {out}/launcher.out")
    return 0 if job.returncode == 0 and identical else 1


if __name__ == "__main__":
    sys.exit(main())
