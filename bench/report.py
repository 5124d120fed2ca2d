"""Turn a benchmark summary into bench/RESULTS.md (section "Training throughput") and bench/results.png."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Dict

START = "<!-- training-benchmark:start -->"
END = "<!-- training-benchmark:end -->"

RATIOS = [  # (label, numerator, denominator, target)
    ("distrib MWMS custom loop / DDP", "distrib_mwms_ctl", "ddp", 1.0),
    ("distrib MWMS fit / DDP", "distrib_mwms_fit", "ddp", 1.0),
    ("distrib MWMS custom loop / DDP with the same malloc settings", "distrib_mwms_ctl", "ddp_malloc_tuned", 1.0),
    ("distrib 1-process fit / plain PyTorch loop (1 thread)", "distrib_1p_fit", "torch_loop_1t", 0.97),
    ("distrib 1-process custom loop / plain PyTorch loop (1 thread)", "distrib_1p_ctl", "torch_loop_1t", 0.97),
    ("distrib single-GPU fit / plain PyTorch loop on CUDA", "distrib_fit_cuda", "torch_loop_cuda", 0.97),
    ("distrib MWMS custom loop / TensorFlow MWMS", "distrib_mwms_ctl", "tf_mwms_keras_legacy", 1.6),
    ("distrib MWMS fit / TensorFlow MWMS", "distrib_mwms_fit", "tf_mwms_keras_legacy", 1.6),
]


def _versions() -> str:
    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    return (f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"torch {torch.__version__}, distrib commit {commit}")


def write_report(summary: Dict, args, here: Path, write: bool = True, failures=()) -> str:
    lines = [START, "## Training throughput: the TF tutorials' MNIST job", "",
             f"Machine: {_versions()}.  ",
             f"Command: `python bench/run.py --reps {args.reps}{' --tf' if args.tf else ''}"
             f"{' --only ' + args.only if args.only else ''}` (medians of {args.reps} interleaved runs; "
             "min–max in brackets). Job: tutorial CNN, RMSprop, 3 epochs × 70 steps, per-worker batch 64 "
             "(global 128; single processes use 128), 1 thread per worker.", "",
             "| system | steady examples/s | launch → first step (s) | last step → return (s) | peak RSS / process (MB) | loss first → last |",
             "|---|---|---|---|---|---|"]
    for name, s in summary.items():
        def cell(key: str, fmt: str) -> str:
            v = s[key]
            return f"{v['median']:{fmt}} [{v['min']:{fmt}}–{v['max']:{fmt}}]"
        lines.append(f"| {name} | {cell('examples_per_s', '.0f')} | {cell('launch_to_first_step_s', '.2f')} | "
                     f"{cell('last_step_to_return_s', '.2f')} | {cell('peak_rss_mb', '.0f')} | "
                     f"{s['first_loss']['median']:.3f} → {s['last_loss']['median']:.3f} |")
    lines += ["", "| same-run ratio (medians) | value | target | met |", "|---|---|---|---|"]
    for label, num, den, target in RATIOS:
        if num in summary and den in summary:
            r = summary[num]["examples_per_s"]["median"] / summary[den]["examples_per_s"]["median"]
            lines.append(f"| {label} | {r:.2f}x | ≥{target:.2f}x | {'yes' if r >= target else 'NO'} |")
    for label, key, better in (("launch → first step", "launch_to_first_step_s", "lower"),
                               ("peak RSS", "peak_rss_mb", "lower")):
        for sysname in ("distrib_mwms_ctl", "distrib_mwms_fit"):
            if sysname in summary and "ddp" in summary:
                r = summary[sysname][key]["median"] / summary["ddp"][key]["median"]
                target = 1.0 if key == "launch_to_first_step_s" else 1.1
                lines.append(f"| {sysname} {label} / DDP's | {r:.2f}x | ≤{target:.1f}x | {'yes' if r <= target else 'NO'} |")
    if "distrib_mwms_fit" in summary:
        ret = summary["distrib_mwms_fit"]["last_step_to_return_s"]["median"]
        lines.append(f"| distrib MWMS fit: last step → fit returns | {ret:.2f} s | ≤0.5 s | {'yes' if ret <= 0.5 else 'NO'} |")
    curves = {n: summary[n]["loss_curve"] for n in summary
              if n.startswith("distrib_mwms_ctl") and summary[n].get("loss_curve")}
    if len(curves) > 1:
        lines += ["", "Gradient compression (opt-in, `CommunicationOptions(gradient_compression=...)`): "
                  "loss of the same run every 10 steps (same seeds and data order in all three):", "",
                  "| step | " + " | ".join(curves) + " |", "|---|" + "---|" * len(curves)]
        for i in range(max(len(c) for c in curves.values())):
            cells = [f"{c[i]:.4f}" if i < len(c) else "" for c in curves.values()]
            lines.append(f"| {i * 10} | " + " | ".join(cells) + " |")
        for name in curves:
            if name != "distrib_mwms_ctl" and "distrib_mwms_ctl" in summary:
                r = summary[name]["examples_per_s"]["median"] / summary["distrib_mwms_ctl"]["examples_per_s"]["median"]
                lines.append(f"\n{name}: {r:.2f}x the uncompressed throughput.")
    if failures:
        lines += ["", f"Failed runs ({len(failures)}), left out of the medians above:", ""]
        lines += [f"- {f}" for f in failures]
    lines += ["", "![throughput](results.png)", "", END]
    text = "\n".join(lines)
    if write:
        _chart(summary, here / "results.png")
        path = here / "RESULTS.md"
        old = path.read_text() if path.exists() else "# Benchmark results\n"
        if START in old and END in old:
            new = old[:old.index(START)] + text + old[old.index(END) + len(END):]
        else:
            new = old.rstrip() + "\n\n" + text + "\n"
        path.write_text(new)
    return text


def _chart(summary: Dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no chart (pip install -c constraints.txt -e '.[bench]')", file=sys.stderr)
        return
    names = list(summary)
    med = [summary[n]["examples_per_s"]["median"] for n in names]
    lo = [m - summary[n]["examples_per_s"]["min"] for m, n in zip(med, names)]
    hi = [summary[n]["examples_per_s"]["max"] - m for m, n in zip(med, names)]
    colors = ["#4c72b0" if n.startswith("distrib") else "#999999" if n.startswith(("torch", "ddp"))
              else "#dd8452" for n in names]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.barh(names, med, xerr=[lo, hi], color=colors, capsize=3)
    ax.set_xlabel("steady-state examples/s (median, min–max)")
    ax.set_title("TF tutorials' MNIST CNN job on this machine (higher is better)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
