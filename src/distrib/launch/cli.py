"""The ``distrib`` command line: ``distrib launch [options] script.py ARGS...`` and ``distrib plot``.

Everything after the script (or after ``-m module``) is passed to the tasks
untouched, even arguments that look like launcher options. ``distrib`` (or
``python -m distrib``) with no command prints the help and exits 0. A
misspelt option gets a suggestion (``--worker`` -> ``--workers``); torchrun's
underscore spellings (``--nproc_per_node``, ``--node_rank``, ``--master_addr``,
``--master_port``, ``--max_restarts``) are accepted as aliases.

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
from typing import Dict, Iterable, List, NoReturn, Optional, Sequence, Tuple

from distrib.launch.api import DEFAULT_GRACE_SECONDS, launch
from distrib.process.exit_codes import EXIT_TASK_FAILED, EXIT_TIMEOUT, EXIT_USAGE, signal_exit_code
from distrib.launch.result import LaunchTimeoutError

__all__ = ["LaunchOptions", "build_parser", "parse_args", "suggest_option", "main", "DEFAULT_MASTER_PORT"]

#: First port of a multi-node cluster when ``--master-port`` is not given (torchrun's).
DEFAULT_MASTER_PORT = 29500

TOP_EXAMPLES = """\
examples:
  distrib launch --workers 2 train.py            two workers on this machine
  distrib launch --help                          every launch option, with examples
  distrib plot logs/run1 -o curves.png           training curves from TensorBoard logs
  python -m distrib                              this help

install: pip install -c constraints.txt ".[plot,tensorboard,datasets]"   (plot, logs, offline MNIST)
"""

LAUNCH_EXAMPLES = """\
examples:
  distrib launch --workers 2 train.py --epochs 3
      two local workers; each gets its own TF_CONFIG, output is prefixed [worker 0], [worker 1]
  distrib launch --chief --workers 2 --ps 1 train_ps.py
      a parameter-server job: chief (runs the ClusterCoordinator), 2 workers, 1 ps task
  distrib launch --workers 2 --max-restarts 3 train.py
      restart the whole group after a crash, up to 3 times (resume with BackupAndRestore)
  distrib launch --workers 2:4 --elastic --max-restarts 2 train.py
      train as soon as 2 workers are up; workers 2 and 3 join the running job (same global batch)
  distrib launch --workers 2 --timeout 600 --verbose -m mypkg.train --lr 0.1
      run a module, stop everything after 10 minutes, full tracebacks for distrib errors
  distrib launch --hosts 10.0.0.1,10.0.0.2 --nnodes 2 --node-rank 0 --nproc-per-node 2 train.py
      node 0 of two machines (run the same line with --node-rank 1 on the second)

A live progress bar is shown when this terminal is one (the chief's bar updates in place);
piped to a file, each epoch prints one line. distrib's own errors print one line per task;
--verbose (or DISTRIB_VERBOSE=1) shows their tracebacks.
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


@dataclass
class LaunchOptions:
    """The parsed ``distrib launch`` command line."""

    target: str
    args: List[str] = field(default_factory=list)
    module: bool = False
    workers: int = 1
    chief: bool = False
    ps: int = 0
    evaluator: bool = False
    max_restarts: int = 0
    host: str = "127.0.0.1"
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    timeout: Optional[float] = None
    verbose: bool = False
    hosts: Optional[List[str]] = None
    node_rank: int = 0
    master_port: int = DEFAULT_MASTER_PORT
    elastic: bool = False
    rejoins: int = 0
    start_workers: Optional[int] = None


def _count_or_range(text: str) -> Tuple[int, int]:
    """``N`` or ``MIN:MAX`` (as torchrun's ``--nnodes``): ``(MIN, MAX)``, ``(N, N)`` for a plain count."""
    low, sep, high = text.partition(":")
    if not sep:
        count = _count(text)
        return count, count
    first, last = _count(low), _count(high)
    if not 1 <= first <= last:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX with 1 <= MIN <= MAX, got {text!r}")
    return first, last


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _text(low: int, high: int) -> str:
    return str(high) if low == high else f"{low}:{high}"


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port in 1..65535, got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 1..65535, got {value}")
    return value


def _add_multinode_flags(run: argparse.ArgumentParser) -> None:
    """The torchrun-style flags of a launch across several machines."""
    nodes = run.add_argument_group(
        "several machines", "Run the same command on every node with its own --node-rank; "
        "node i starts workers i*P .. i*P+P-1 (P = --nproc-per-node) on ports "
        "--master-port + global index; worker 0 on the first host is the chief.")
    nodes.add_argument("--hosts", default=None, metavar="H1,H2,...",
                       help="address of every node, the same list on every node")
    nodes.add_argument("--nnodes", type=_count_or_range, default=None, metavar="N|MIN:MAX",
                       help="number of nodes (default: the number of --hosts); MIN:MAX with --elastic: "
                            "nodes 0..MIN-1 start the job, a later node joins it when its launcher starts")
    nodes.add_argument("--node-rank", "--node_rank", type=_count, default=0, metavar="I",
                       help="this node's index in --hosts (default: 0)")
    nodes.add_argument("--master-addr", "--master_addr", default=None, metavar="HOST",
                       help="the chief's host; must be the first of --hosts")
    nodes.add_argument("--master-port", "--master_port", type=_port, default=None, metavar="PORT",
                       help=f"the chief's port, first of the cluster's ports "
                            f"(default: {DEFAULT_MASTER_PORT})")
    nodes.add_argument("--nproc-per-node", "--nproc_per_node", type=_count, default=None,
                       metavar="P", help="worker tasks per node (same as --workers)")


def _multinode(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Check the multi-node flags against each other; fill ``ns.hosts``, ``ns.workers``, ``ns.start_workers``."""
    start_workers, ns.workers = ns.workers
    start_nodes, nnodes = ns.nnodes if ns.nnodes is not None else (None, None)
    ns.nnodes = nnodes
    if ns.nproc_per_node is not None:
        if ns.workers not in (1, ns.nproc_per_node) or start_workers != ns.workers:
            parser.error(f"--nproc-per-node {ns.nproc_per_node} and --workers {_text(start_workers, ns.workers)} "
                         f"disagree; give one of them")
        ns.workers = start_workers = ns.nproc_per_node
    ns.start_workers = None
    if start_workers != ns.workers or (start_nodes is not None and start_nodes != nnodes):
        if not ns.elastic:
            parser.error("a range of workers (MIN:MAX) needs --elastic: the tasks after MIN join the running job")
        if ns.hosts is not None and start_workers != ns.workers:
            parser.error("across machines, give the range as --nnodes MIN:MAX (whole nodes join)")
        ns.start_workers = start_workers if start_nodes is None else start_nodes * ns.workers
    hosts = None
    if ns.hosts is not None:
        hosts = [h.strip() for h in ns.hosts.split(",")]
        if not all(hosts):
            parser.error(f"--hosts {ns.hosts!r} has an empty entry; expected H1,H2,...")
    elif ns.master_addr is not None or ns.nnodes is not None or ns.master_port is not None:
        if (ns.nnodes or 1) > 1:
            parser.error(f"--nnodes {ns.nnodes} needs --hosts H1,...,H{ns.nnodes}: every node "
                         f"must know every other node's address to build the same TF_CONFIG")
        hosts = [ns.master_addr or ns.host]
    if hosts is not None:
        if ns.nnodes is not None and ns.nnodes != len(hosts):
            parser.error(f"--nnodes {ns.nnodes} but --hosts lists {len(hosts)} node(s)")
        if ns.master_addr is not None and ns.master_addr != hosts[0]:
            parser.error(f"--master-addr {ns.master_addr} is not the first of --hosts "
                         f"({hosts[0]}); the chief runs on the first host")
        if ns.node_rank >= len(hosts):
            parser.error(f"--node-rank {ns.node_rank} is out of range for {len(hosts)} node(s) "
                         f"(valid 0..{len(hosts) - 1})")
    elif ns.node_rank:
        parser.error("--node-rank needs --hosts (or --master-addr)")
    ns.hosts = hosts
    if ns.master_port is None:
        ns.master_port = DEFAULT_MASTER_PORT


def _add_launch(commands: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    run = commands.add_parser(
        "launch", help="run a script as every task of a local cluster",
        description="Start one process per task on this host, each with its own TF_CONFIG; "
                    "prefix their output with the task's name; stop them all when one fails.",
        epilog=LAUNCH_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False)
    run.add_argument("--workers", type=_count_or_range, default=(1, 1), metavar="N|MIN:MAX",
                     help="number of worker tasks (default: 1); MIN:MAX with --elastic: training starts "
                          "with the first MIN, the others join the running job as they come up")
    run.add_argument("--chief", action="store_true", help="add a chief task")
    run.add_argument("--ps", type=_count, default=0, metavar="K",
                     help="number of parameter-server tasks (default: 0)")
    run.add_argument("--evaluator", action="store_true", help="add an evaluator task")
    run.add_argument("--max-restarts", "--max_restarts", type=_count, default=0, metavar="K",
                     help="restart the whole group up to K times after a failure (default: 0)")
    run.add_argument("--elastic", action="store_true",
                     help="replace a lost worker alone: the others keep their state and it catches up "
                          "from them (needs --max-restarts; see docs/elastic.md)")
    run.add_argument("--rejoins", type=_count, default=0, metavar="N",
                     help="with --elastic: start a worker that left the running job again, up to N times in "
                          "all; it rejoins at a step boundary (default: 0)")
    run.add_argument("--host", default="127.0.0.1",
                     help="address to pick ports on and publish in TF_CONFIG (default: 127.0.0.1)")
    run.add_argument("--grace-seconds", type=_seconds, default=DEFAULT_GRACE_SECONDS, metavar="S",
                     help="seconds between SIGTERM and SIGKILL when stopping tasks "
                          f"(default: {DEFAULT_GRACE_SECONDS:g})")
    run.add_argument("--timeout", type=_seconds, default=None, metavar="S",
                     help="stop everything and fail after S seconds (default or 0: no limit)")
    run.add_argument("--verbose", action="store_true",
                     help="full tracebacks for distrib's own errors (sets DISTRIB_VERBOSE=1)")
    _add_multinode_flags(run)
    run.add_argument("-m", "--module", action="store_true",
                     help="TARGET is a module to run as `python -m TARGET`")
    run.add_argument("target", metavar="TARGET", help="script.py, or a module name with -m")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                     help="arguments passed to every task")
    return run


def _add_plot(commands: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    plot = commands.add_parser(
        "plot", help="draw training curves (TensorBoard logs, CSVLogger file, saved History) as a PNG",
        description="Read training curves from a TensorBoard log directory (the epoch_* "
                    "scalars the TensorBoard callback writes: LOGDIR/train, LOGDIR/validation), "
                    "a CSVLogger file, or a History saved as JSON (json.dump(history.history, f)), "
                    "and draw one panel per metric, train and validation overlaid.",
        epilog="examples:\n  distrib plot logs/run1 -o curves.png\n  distrib plot training.csv\n"
               "  distrib plot history.json\n\n"
               "needs matplotlib (and tensorboard for log directories): "
               "pip install \"distrib[plot,tensorboard]\"",
        formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    plot.add_argument("logdir", metavar="PATH",
                      help="a TensorBoard log_dir, a CSVLogger .csv file or a History .json file")
    plot.add_argument("-o", "--output", default="curves.png", metavar="PNG",
                      help="the image to write (default: curves.png)")
    return plot


def build_parser() -> argparse.ArgumentParser:
    """The ``distrib`` parser with its ``launch`` and ``plot`` subcommands."""
    parser = _Parser(
        prog="distrib", description="distrib: tf.distribute's programming model on PyTorch.",
        epilog=TOP_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND",
                                     parser_class=_Parser)
    commands.required = True
    parser.commands = {"launch": _add_launch(commands), "plot": _add_plot(commands)}
    return parser


def _launch_options(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> LaunchOptions:
    _multinode(ns, parser)
    return LaunchOptions(
        target=ns.target, args=list(ns.args), module=ns.module, workers=ns.workers,
        chief=ns.chief, ps=ns.ps, evaluator=ns.evaluator, max_restarts=ns.max_restarts,
        host=ns.host, grace_seconds=ns.grace_seconds,
        timeout=None if ns.timeout == 0 else ns.timeout, verbose=ns.verbose,
        hosts=ns.hosts, node_rank=ns.node_rank, master_port=ns.master_port, elastic=ns.elastic,
        rejoins=ns.rejoins, start_workers=ns.start_workers)


def parse_args(argv: Sequence[str]) -> LaunchOptions:
    """Parse a ``distrib launch`` command line (without the program name); exits 2 on bad input."""
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    if ns.command != "launch":
        parser.error(f"expected the launch command, got {ns.command!r}")
    return _launch_options(ns, parser.commands["launch"])


def _run_launch(opts: LaunchOptions) -> int:
    try:
        result = launch(
            opts.target, opts.args, workers=opts.workers, chief=opts.chief, ps=opts.ps,
            evaluator=opts.evaluator, module=opts.module, max_restarts=opts.max_restarts,
            host=opts.host, grace_seconds=opts.grace_seconds, timeout=opts.timeout,
            verbose=opts.verbose, hosts=opts.hosts, node_rank=opts.node_rank,
            master_port=opts.master_port, elastic=opts.elastic, rejoins=opts.rejoins,
            start_workers=opts.start_workers)
    except LaunchTimeoutError:  # already reported; caught first: it is an OSError too
        return EXIT_TIMEOUT
    except (ValueError, OSError) as exc:
        print(str(exc) if str(exc).startswith("distrib launch:") else f"distrib launch: {exc}",
              file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return signal_exit_code(2)
    return result.returncode


def _run_plot(ns: argparse.Namespace) -> int:
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``distrib`` console script and ``python -m distrib``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv:
        parser.print_help()
        return 0
    ns = parser.parse_args(argv)
    if ns.command == "plot":
        return _run_plot(ns)
    return _run_launch(_launch_options(ns, parser.commands["launch"]))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
