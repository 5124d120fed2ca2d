"""Throughput across namespace hosts under added latency and loss: distrib vs DDP.

Two hosts (network namespaces, `distrib.testing.netns`), one worker each,
joined by the user-space wire (`distrib.testing.wire`: this machine's kernel
has no ``sch_netem``), which delays every frame (so the round trip is twice
the delay) and drops the given share; 9000-byte MTU. The same MLP job runs as distrib (`MultiWorkerMirroredStrategy` +
`Model.fit`, launched with ``distrib launch --hosts``) and as plain DDP
(gloo, same model, data and steps), interleaved, ``--reps`` times per
condition. Each worker times its own steady steps (after ``WARMUP`` steps);
the table gives medians of worker 0's examples/s and distrib / DDP ratios.

Needs root (namespaces). Usage::

    python bench/bench_multihost.py --reps 3          # writes the section of bench/RESULTS.md
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from distrib.testing.netns import NamespaceHosts, namespaces_available  # noqa: E402

STEPS, WARMUP, GLOBAL_BATCH, WIDTH = 60, 10, 128, 256
PORT = 29600
CONDITIONS: List[Tuple[str, float, float]] = [
    ("0 ms", 0.0, 0.0), ("5 ms", 5.0, 0.0), ("20 ms", 20.0, 0.0), ("5 ms + 1% loss", 5.0, 1.0)]

COMMON = f'''
import json, os, sys, time
import numpy as np
import torch
torch.set_num_threads(1)
STEPS, WARMUP, GLOBAL_BATCH, WIDTH = {STEPS}, {WARMUP}, {GLOBAL_BATCH}, {WIDTH}
def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH),
                               torch.nn.ReLU(), torch.nn.Linear(WIDTH, 1))
rs = np.random.RandomState(0)
X = rs.randn(STEPS * GLOBAL_BATCH, 64).astype("float32")
Y = (X[:, :1] * 2).astype("float32")
def report(path, rank, times):
    steady = times[-1] - times[WARMUP - 1]
    with open(os.path.join(path, f"rank{{rank}}.json"), "w") as f:
        json.dump({{"examples_per_s": (len(times) - WARMUP) * GLOBAL_BATCH / steady}}, f)
'''

DISTRIB_SCRIPT = COMMON + '''
import distrib
from distrib.callbacks.callback import Callback
strategy = distrib.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = distrib.Model(build())
    model.compile(optimizer="sgd", loss="mse")
times = []
class Clock(Callback):
    def on_train_batch_end(self, batch, logs=None):
        times.append(time.perf_counter())
model.fit(X, Y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[Clock()])
report(sys.argv[1], strategy.replica_id, times)
'''

DDP_SCRIPT = COMMON + '''
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
model = DDP(build())
opt = torch.optim.SGD(model.parameters(), lr=0.01)
local = GLOBAL_BATCH // world
times = []
for step in range(STEPS):
    rows = slice(step * GLOBAL_BATCH + rank * local, step * GLOBAL_BATCH + (rank + 1) * local)
    loss = torch.nn.functional.mse_loss(model(torch.from_numpy(X[rows])), torch.from_numpy(Y[rows]))
    opt.zero_grad()
    loss.backward()
    opt.step()
    times.append(time.perf_counter())
report(sys.argv[1], rank, times)
dist.destroy_process_group()
'''


def run_once(system: str, delay: float, loss: float, work: Path) -> float:
    out = Path(tempfile.mkdtemp(dir=work))
    script = work / f"job_{system}.py"
    with NamespaceHosts(2, wire=True, delay_ms=delay, loss_percent=loss) as hosts:
        procs = []
        for i in range(2):
            env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
            env.pop("TF_CONFIG", None)
            if system == "distrib":
                argv = [sys.executable, "-m", "distrib", "launch", "--hosts",
                        f"{hosts.address(0)},{hosts.address(1)}", "--node-rank", str(i),
                        "--master-port", str(PORT), "--timeout", "500", str(script), str(out)]
            else:
                env.update(RANK=str(i), WORLD_SIZE="2", MASTER_ADDR=hosts.address(0),
                           MASTER_PORT=str(PORT), GLOO_SOCKET_IFNAME=hosts.interface(i))
                argv = [sys.executable, str(script), str(out)]
            procs.append(hosts.popen(i, argv, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True))
        for proc in procs:
            text, _ = proc.communicate(timeout=560)
            if proc.returncode != 0:
                raise RuntimeError(f"{system} at {delay} ms / {loss}% failed:\n{text[-2000:]}")
    return json.loads((out / "rank0.json").read_text())["examples_per_s"]


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def section(samples: Dict[Tuple[str, str], List[float]], reps: int) -> str:
    lines = [
        "<!-- multihost-benchmark:start -->",
        "## Across hosts: latency and loss (namespace hosts)",
        "",
        f"Machine: {platform.platform()}, {os.cpu_count()} cores, distrib commit {commit()}.  ",
        f"Command: `python bench/bench_multihost.py --reps {reps}` (root). Two network-namespace hosts, "
        f"one worker each, joined by distrib.testing.wire (a user-space hub between TAP devices, 9000-byte "
        f"MTU: this kernel has no `sch_netem`), which delays every frame (round trip = twice the delay) "
        f"and drops the given share; the hub itself costs CPU on this 2-core machine, so compare rows "
        f"as ratios; MLP 64-{WIDTH}-{WIDTH}-1 ({64 * WIDTH + WIDTH + WIDTH * WIDTH + WIDTH + WIDTH + 1:,} "
        f"parameters), SGD, global batch {GLOBAL_BATCH}, {STEPS} steps, the first {WARMUP} not timed; "
        f"medians of {reps} interleaved runs (min–max in brackets).",
        "",
        "| link | distrib examples/s | DDP examples/s | distrib / DDP |",
        "|---|---:|---:|---:|",
    ]
    for name, _, _ in CONDITIONS:
        d, p = samples[(name, "distrib")], samples[(name, "ddp")]
        lines.append(
            f"| {name} | {statistics.median(d):,.0f} ({min(d):,.0f}–{max(d):,.0f}) | "
            f"{statistics.median(p):,.0f} ({min(p):,.0f}–{max(p):,.0f}) | "
            f"{statistics.median(d) / statistics.median(p):.2f}x |")
    lines.append("<!-- multihost-benchmark:end -->")
    return "\n".join(lines) + "\n"


def write_results(text: str) -> None:
    path = ROOT / "bench" / "RESULTS.md"
    current = path.read_text()
    start, end = "<!-- multihost-benchmark:start -->", "<!-- multihost-benchmark:end -->\n"
    if start in current and end in current:
        before, rest = current.split(start, 1)
        current = before + text + rest.split(end, 1)[1]
    else:
        current = current.rstrip("\n") + "\n\n" + text
    path.write_text(current)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    ns = parser.parse_args()
    reason = namespaces_available()
    if reason:
        sys.exit(f"bench_multihost: cannot build namespace hosts: {reason}")
    samples: Dict[Tuple[str, str], List[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "job_distrib.py").write_text(DISTRIB_SCRIPT)
        (work / "job_ddp.py").write_text(DDP_SCRIPT)
        for rep in range(ns.reps):
            for name, delay, loss in CONDITIONS:
                for system in (("distrib", "ddp") if rep % 2 == 0 else ("ddp", "distrib")):
                    value = run_once(system, delay, loss, work)
                    samples.setdefault((name, system), []).append(value)
                    print(f"rep {rep} {name:>15} {system:>8}: {value:,.0f} examples/s", flush=True)
    text = section(samples, ns.reps)
    print(text)
    if not ns.no_write:
        write_results(text)


if __name__ == "__main__":
    main()
