"""The ``distrib`` command line: ``distrib launch [options] TARGET [ARGS...]``, ``distrib plot``, ``distrib env``.

Everything after the script (or after ``-m module``) is passed to the tasks
untouched, even arguments that look like launcher options. ``distrib`` (or
``python -m distrib``) with no command prints the help and exits 0. A
misspelt option gets a suggestion (``--worker`` -> ``--workers``); torchrun's
underscore spellings (``--nproc_per_node``, ``--node_rank``, ``--master_addr``,
``--master_port``, ``--max_restarts``, ``--log_dir``) are accepted as aliases.
``distrib --version`` prints distrib's, torch's and Python's versions without
importing torch. Help fits 80 columns (`distrib.launch.help_format`).

Example:
    >>> opts = parse_args(["launch", "--workers", "2", "train.py", "--workers", "9"])
    >>> opts.workers, opts.target, opts.args
    (2, 'train.py', ['--workers', '9'])
    >>> parse_args(["launch", "-m", "pkg.train", "--lr", "0.1"]).module
    True
    >>> suggest_option("--worker", ["--workers", "--chief"])
    '--workers'
    >>> parse_args(["launch", "--nproc_per_node", "2", "--master_port=29600", "train.py"]).workers
    2

Exit codes: 0 success; 1 a task failed (and no restart was left); 2 bad
command line; 124 ``--timeout`` ran out; 130 / 143 / 129 the launcher got
SIGINT / SIGTERM / SIGHUP.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, NoReturn, Optional, Sequence

from distrib.launch.api import launch
from distrib.launch.config import DEFAULT_GRACE_SECONDS, LaunchConfig
from distrib.launch.cli_commands import INSTALL_EXTRAS, add_env, add_plot, run_env, run_plot
from distrib.launch.cli_multinode import DEFAULT_MASTER_PORT, add_multinode_flags, check_multinode
from distrib.launch.cli_types import count, count_or_range, seconds
from distrib.launch.help_format import FittedHelpFormatter
from distrib.launch.output_select import DEFAULT_OUTPUT_FROM, OutputSelection
from distrib.process.exit_codes import EXIT_TIMEOUT, EXIT_USAGE, signal_exit_code
from distrib.launch.result import LaunchTimeoutError

__all__ = ["LaunchOptions", "build_parser", "parse_args", "suggest_option", "main", "DEFAULT_MASTER_PORT",
           "version_text"]

TOP_EXAMPLES = f"""\
examples:
  distrib launch --workers 2 train.py     two workers on this machine
  distrib launch --help                   every launch option, with examples
  distrib env                             versions, devices, cluster variables
  distrib plot logs/run1 -o curves.png    training curves from TensorBoard logs
  python -m distrib                       this help

Optional extras (plots, TensorBoard logs, the offline MNIST), from distrib's
clone: {INSTALL_EXTRAS}
"""

LAUNCH_EXAMPLES = """\
examples:
  distrib launch --workers 2 train.py --epochs 3
      two local workers, each with its own TF_CONFIG; the chief's output is
      shown, prefixed [worker 0], and every worker's errors
  distrib launch --workers 8 --output-from all --log-dir logs train.py
      every worker's output on the terminal, and each one's in logs/worker-N.log
  distrib launch --chief --workers 2 --ps 1 train_ps.py
      a parameter-server job: chief (runs the ClusterCoordinator), 2 workers,
      1 ps task
  distrib launch --workers 2 --max-restarts 3 train.py
      restart the whole group after a crash, up to 3 times (resume with
      BackupAndRestore)
  distrib launch --workers 2:4 --elastic --max-restarts 2 train.py
      train as soon as 2 workers are up; workers 2 and 3 join the running job
  distrib launch --workers 2 --timeout 600 --verbose -m mypkg.train --lr 0.1
      run a module, stop everything after 10 minutes, full tracebacks
  distrib launch --hosts h0,h1 --nnodes 2 --node-rank 0 train.py
      node 0 of two machines (the same line with --node-rank 1 on the second)

A live progress bar is shown when this terminal is one (the chief's bar
updates in place); piped to a file, each epoch prints one line. distrib's own
errors print one line per task; --verbose (or DISTRIB_VERBOSE=1) shows their
tracebacks.
"""

#: Options of other launchers people type by habit, and the distrib option that does it.
#: (torchrun's underscore spellings -- ``--nproc_per_node``, ``--node_rank``,
#: ``--master_addr``, ``--master_port``, ``--max_restarts`` -- are accepted as they are.)
KNOWN_ALIASES: Dict[str, str] = {
    "--num-workers": "--workers",
    "--np": "--workers",
    "--num-ps": "--ps",
    "--num_workers": "--workers",
    "--rdzv_endpoint": "--master-addr",
    "--rdzv-endpoint": "--master-addr",
    "--local-ranks-filter": "--output-from",
    "--local_ranks_filter": "--output-from",
    "--tee": "--log-dir",
    "--redirects": "--log-dir",
}


def suggest_option(flag: str, known: Iterable[str]) -> Optional[str]:
    """The known option ``flag`` was probably meant to be, or ``None``."""
    name = flag.split("=", 1)[0]
    known = list(known)
    if KNOWN_ALIASES.get(name) in known:
        return KNOWN_ALIASES[name]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return close[0] if close else None


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors say which known option was probably meant."""

    commands: Dict[str, argparse.ArgumentParser] = {}
    _argv: List[str] = []

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        # Unknown options surface at the top level: answer with the command's own usage.
        command = next((a for a in self._argv if a in self.commands), None)
        target = self.commands[command] if command else self
        found = re.match(r"unrecognized arguments: (.*)", message)
        if found:
            known = [s for a in target._actions for s in a.option_strings if s.startswith("--")]
            hints = []
            for flag in found.group(1).split():
                guess = suggest_option(flag, known) if flag.startswith("-") else None
                if guess:
                    hints.append(f"{flag.split('=', 1)[0]}: did you mean {guess}?")
            if hints:
                message = f"{message} ({'; '.join(hints)})"
            message += f"; see '{target.prog} --help'"
            target.print_usage(sys.stderr)
            target.exit(EXIT_USAGE, f"{target.prog}: error: {message}\n")
        super().error(message)


@dataclass(frozen=True, kw_only=True)
class LaunchOptions(LaunchConfig):
    """The parsed ``distrib launch`` command line: the program and its arguments, and a `LaunchConfig`."""

    target: str
    args: List[str] = field(default_factory=list)


def _output_from(text: str) -> str:
    try:
        OutputSelection.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("--output-from: ", "")) from None
    return text


def _add_launch(commands: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    run = commands.add_parser(
        "launch", help="run a script as every task of a local cluster",
        usage="distrib launch [options] TARGET [ARGS...]",
        description="Start one process per task on this host, each with its own TF_CONFIG; "
                    "prefix their output with the task's name; stop them all when one fails.",
        epilog=LAUNCH_EXAMPLES, formatter_class=FittedHelpFormatter, allow_abbrev=False)
    run.add_argument("--workers", type=count_or_range, default=(1, 1), metavar="N|MIN:MAX",
                     help="number of worker tasks (default: 1); MIN:MAX with --elastic: training starts "
                          "with the first MIN, the others join the running job as they come up")
    run.add_argument("--chief", action="store_true", help="add a chief task")
    run.add_argument("--ps", type=count, default=0, metavar="K",
                     help="number of parameter-server tasks (default: 0)")
    run.add_argument("--evaluator", action="store_true", help="add an evaluator task")
    run.add_argument("--max-restarts", "--max_restarts", type=count, default=0, metavar="K",
                     help="restart the whole group up to K times after a failure (default: 0)")
    run.add_argument("--elastic", action="store_true",
                     help="replace a lost worker alone: the others keep their state and it catches up "
                          "from them (needs --max-restarts; see docs/elastic.md)")
    run.add_argument("--rejoins", type=count, default=0, metavar="N",
                     help="with --elastic: start a worker that left the running job again, up to N times in "
                          "all; it rejoins at a step boundary (default: 0)")
    run.add_argument("--host", default="127.0.0.1",
                     help="address to pick ports on and publish in TF_CONFIG (default: 127.0.0.1)")
    run.add_argument("--grace-seconds", type=seconds, default=DEFAULT_GRACE_SECONDS, metavar="S",
                     help="seconds between SIGTERM and SIGKILL when stopping tasks "
                          f"(default: {DEFAULT_GRACE_SECONDS:g})")
    run.add_argument("--timeout", type=seconds, default=None, metavar="S",
                     help="stop everything and fail after S seconds (default or 0: no limit)")
    run.add_argument("--verbose", action="store_true",
                     help="full tracebacks for distrib's own errors (sets DISTRIB_VERBOSE=1)")
    shown = run.add_argument_group(
        "output", "Every task's standard error always reaches this terminal; --output-from "
                  "chooses whose standard output does.")
    shown.add_argument("--output-from", type=_output_from, default=None, metavar="WHO",
                       help=f"whose standard output to show: {DEFAULT_OUTPUT_FROM} (the default: the chief "
                            "task, else worker 0), all, none, or a list such as 0,1 or worker:1,ps")
    shown.add_argument("--log-dir", "--log_dir", default=None, metavar="DIR",
                       help="also append each task's whole output to DIR/<task>.log (worker-1.log) "
                            "and the launcher's lines to DIR/launcher.log")
    add_multinode_flags(run)
    run.add_argument("-m", "--module", action="store_true",
                     help="TARGET is a module to run as `python -m TARGET`")
    run.add_argument("target", metavar="TARGET", nargs="?", default=None,
                     help="script.py, or with -m a module name (python -m TARGET)")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                     help="arguments passed to every task")
    return run


def version_text() -> str:
    """``distrib X (torch Y, Python Z)``, read from the installed metadata: no torch import."""
    import importlib.metadata
    import platform

    from distrib import __version__

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    return f"distrib {__version__} (torch {torch_version}, Python {platform.python_version()})"


def build_parser() -> argparse.ArgumentParser:
    """The ``distrib`` parser with its ``launch``, ``plot`` and ``env`` subcommands."""
    parser = _Parser(
        prog="distrib", description="distrib: tf.distribute's programming model on PyTorch.",
        epilog=TOP_EXAMPLES, formatter_class=FittedHelpFormatter)
    parser.add_argument("--version", action="version", version=version_text(),
                        help="print distrib's, torch's and Python's versions and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND",
                                     parser_class=_Parser)
    commands.required = True
    parser.commands = {"launch": _add_launch(commands), "plot": add_plot(commands), "env": add_env(commands)}
    return parser


def _launch_options(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> LaunchOptions:
    if ns.target is None:
        parser.error("no script given: distrib launch [options] TARGET [ARGS...] "
                     "(TARGET: script.py, or -m module)")
    check_multinode(ns, parser)
    return LaunchOptions(
        target=ns.target, args=list(ns.args), module=ns.module, workers=ns.workers,
        chief=ns.chief, ps=ns.ps, evaluator=ns.evaluator, max_restarts=ns.max_restarts,
        host=ns.host, grace_seconds=ns.grace_seconds,
        timeout=None if ns.timeout == 0 else ns.timeout, verbose=ns.verbose,
        hosts=ns.hosts, node_rank=ns.node_rank, master_port=ns.master_port, elastic=ns.elastic,
        rejoins=ns.rejoins, start_workers=ns.start_workers, output_from=ns.output_from,
        log_dir=ns.log_dir)


def parse_args(argv: Sequence[str]) -> LaunchOptions:
    """Parse a ``distrib launch`` command line (without the program name); exits 2 on bad input."""
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    if ns.command != "launch":
        parser.error(f"expected the launch command, got {ns.command!r}")
    return _launch_options(ns, parser.commands["launch"])


def _run_launch(opts: LaunchOptions) -> int:
    try:
        result = launch(opts.target, opts.args, opts.launch_config())
    except LaunchTimeoutError:  # already reported; caught first: it is an OSError too
        return EXIT_TIMEOUT
    except (ValueError, OSError) as exc:
        print(str(exc) if str(exc).startswith("distrib launch:") else f"distrib launch: {exc}",
              file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return signal_exit_code(2)
    return result.returncode


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``distrib`` console script and ``python -m distrib``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv:
        parser.print_help()
        return 0
    ns = parser.parse_args(argv)
    if ns.command == "plot":
        return run_plot(ns)
    if ns.command == "env":
        return run_env(ns)
    return _run_launch(_launch_options(ns, parser.commands["launch"]))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
