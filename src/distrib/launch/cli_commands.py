"""The small ``distrib`` commands: ``distrib plot`` and ``distrib env``.

Example:
    >>> parser = argparse.ArgumentParser(prog="distrib")
    >>> commands = parser.add_subparsers(dest="command")
    >>> _ = add_plot(commands), add_env(commands)
    >>> parser.parse_args(["plot", "logs/run1"]).output
    'curves.png'
"""
from __future__ import annotations

import argparse
import sys

from distrib.launch.help_format import FittedHelpFormatter
from distrib.process.exit_codes import EXIT_TASK_FAILED

__all__ = ["add_plot", "run_plot", "add_env", "run_env", "INSTALL_EXTRAS"]

INSTALL_EXTRAS = 'pip install -c constraints.txt ".[plot,tensorboard,datasets]"'
"""How to add distrib's optional extras, from a clone of its repository (it is not on a package index)."""

_PLOT_EPILOG = f"""\
examples:
  distrib plot logs/run1 -o curves.png
  distrib plot training.csv
  distrib plot history.json

Needs matplotlib, and tensorboard to read log directories: pip install
matplotlib tensorboard (or, in distrib's clone, {INSTALL_EXTRAS}).
"""

_ENV_EPILOG = """\
Paste its output into a bug report: it never prints the job secret, nor any
variable whose name says it holds one. Run it where the job runs (inside the
task's environment) to see what a task sees.
"""


def add_plot(commands: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Add ``distrib plot PATH [-o PNG]``."""
    plot = commands.add_parser(
        "plot", help="draw training curves (TensorBoard logs, CSVLogger file, saved History) as a PNG",
        description="Read training curves from a TensorBoard log directory (the epoch_* "
                    "scalars the TensorBoard callback writes: LOGDIR/train, LOGDIR/validation), "
                    "a CSVLogger file, or a History saved as JSON (json.dump(history.history, f)), "
                    "and draw one panel per metric, train and validation overlaid.",
        epilog=_PLOT_EPILOG, formatter_class=FittedHelpFormatter, allow_abbrev=False)
    plot.add_argument("logdir", metavar="PATH",
                      help="a TensorBoard log_dir, a CSVLogger .csv file or a History .json file")
    plot.add_argument("-o", "--output", default="curves.png", metavar="PNG",
                      help="the image to write (default: curves.png)")
    return plot


def run_plot(ns: argparse.Namespace) -> int:
    """Draw the curves; one line on success or failure."""
    from distrib.errors import DistribError
    from distrib.plot import plot_path

    try:
        figure = plot_path(ns.logdir, ns.output)
    except (DistribError, ImportError, OSError) as exc:
        print(f"distrib plot: {exc}", file=sys.stderr)
        return EXIT_TASK_FAILED
    panels = len(figure.axes)
    print(f"distrib plot: wrote {ns.output} ({panels} panel{'s' if panels != 1 else ''})")
    return 0


def add_env(commands: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Add ``distrib env``."""
    return commands.add_parser(
        "env", help="print versions, devices, backend, cluster variables and the secret's source",
        description="Print what a bug report needs: the versions of distrib, Python, torch "
                    "(and its CUDA build) and the packages distrib uses; the devices torch sees; the "
                    "device and torch.distributed backend this process would train with; the cluster "
                    "it would join (TF_CONFIG, torchrun's or SLURM's variables); where the job "
                    "secret would come from; and the variables distrib reads.",
        epilog=_ENV_EPILOG, formatter_class=FittedHelpFormatter, allow_abbrev=False)


def run_env(ns: argparse.Namespace) -> int:
    """Print `distrib.env_report.env_report` for this process."""
    from distrib.env_report import env_report

    sys.stdout.write(env_report())
    return 0
