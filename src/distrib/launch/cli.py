"""The ``distrib`` command line: ``distrib launch [options] script.py ARGS...``.

Everything after the script (or after ``-m module``) is passed to the tasks
untouched, even arguments that look like launcher options.

Example:
    >>> opts = parse_args(["launch", "--workers", "2", "train.py", "--workers", "9"])
    >>> opts.workers, opts.target, opts.args
    (2, 'train.py', ['--workers', '9'])
    >>> parse_args(["launch", "-m", "pkg.train", "--lr", "0.1"]).module
    True

Exit codes: 0 success; 1 a task failed (and no restart was left); 2 bad
command line; 124 ``--timeout`` ran out; 130 / 143 / 129 the launcher got
SIGINT / SIGTERM / SIGHUP.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from distrib.launch.api import DEFAULT_GRACE_SECONDS, launch
from distrib.launch.exit_codes import EXIT_TIMEOUT, EXIT_USAGE, signal_exit_code
from distrib.launch.result import LaunchTimeoutError

__all__ = ["LaunchOptions", "build_parser", "parse_args", "main", "DEFAULT_MASTER_PORT"]

#: First port of a multi-node cluster when ``--master-port`` is not given (torchrun's).
DEFAULT_MASTER_PORT = 29500


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
    hosts: Optional[List[str]] = None
    node_rank: int = 0
    master_port: int = DEFAULT_MASTER_PORT


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


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
    nodes.add_argument("--nnodes", type=_count, default=None, metavar="N",
                       help="number of nodes (default: the number of --hosts)")
    nodes.add_argument("--node-rank", type=_count, default=0, metavar="I",
                       help="this node's index in --hosts (default: 0)")
    nodes.add_argument("--master-addr", default=None, metavar="HOST",
                       help="the chief's host; must be the first of --hosts")
    nodes.add_argument("--master-port", type=_port, default=None, metavar="PORT",
                       help=f"the chief's port, first of the cluster's ports "
                            f"(default: {DEFAULT_MASTER_PORT})")
    nodes.add_argument("--nproc-per-node", type=_count, default=None, metavar="P",
                       help="worker tasks per node (same as --workers)")


def _multinode(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Check the multi-node flags against each other; fill ``ns.hosts`` and ``ns.workers``."""
    if ns.nproc_per_node is not None:
        if ns.workers not in (1, ns.nproc_per_node):
            parser.error(f"--nproc-per-node {ns.nproc_per_node} and --workers {ns.workers} "
                         f"disagree; give one of them")
        ns.workers = ns.nproc_per_node
    hosts = None
    if ns.hosts is not None:
        hosts = [h.strip() for h in ns.hosts.split(",")]
        if not all(hosts):
            parser.error(f"--hosts {ns.hosts!r} has an empty entry; expected H1,H2,...")
    elif ns.master_addr is not None or ns.nnodes is not None:
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
    elif ns.node_rank or ns.master_port is not None:
        parser.error("--node-rank and --master-port need --hosts (or --master-addr)")
    ns.hosts = hosts
    if ns.master_port is None:
        ns.master_port = DEFAULT_MASTER_PORT


def build_parser() -> argparse.ArgumentParser:
    """The ``distrib`` parser with its ``launch`` subcommand."""
    parser = argparse.ArgumentParser(
        prog="distrib", description="distrib: tf.distribute's programming model on PyTorch.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    run = commands.add_parser(
        "launch", help="run a script as every task of a local cluster",
        description="Start one process per task on this host, each with its own TF_CONFIG; "
                    "prefix their output with the task's name; stop them all when one fails.")
    run.add_argument("--workers", type=_count, default=1, metavar="N",
                     help="number of worker tasks (default: 1)")
    run.add_argument("--chief", action="store_true", help="add a chief task")
    run.add_argument("--ps", type=_count, default=0, metavar="K",
                     help="number of parameter-server tasks (default: 0)")
    run.add_argument("--evaluator", action="store_true", help="add an evaluator task")
    run.add_argument("--max-restarts", type=_count, default=0, metavar="K",
                     help="restart the whole group up to K times after a failure (default: 0)")
    run.add_argument("--host", default="127.0.0.1",
                     help="address to pick ports on and publish in TF_CONFIG (default: 127.0.0.1)")
    run.add_argument("--grace-seconds", type=_seconds, default=DEFAULT_GRACE_SECONDS, metavar="S",
                     help="seconds between SIGTERM and SIGKILL when stopping tasks "
                          f"(default: {DEFAULT_GRACE_SECONDS:g})")
    run.add_argument("--timeout", type=_seconds, default=None, metavar="S",
                     help="stop everything and fail after S seconds (default or 0: no limit)")
    _add_multinode_flags(run)
    run.add_argument("-m", "--module", action="store_true",
                     help="TARGET is a module to run as `python -m TARGET`")
    run.add_argument("target", metavar="TARGET", help="script.py, or a module name with -m")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                     help="arguments passed to every task")
    return parser


def parse_args(argv: Sequence[str]) -> LaunchOptions:
    """Parse a ``distrib`` command line (without the program name); exits 2 on bad input."""
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    _multinode(ns, parser)
    if ns.timeout == 0:
        ns.timeout = None
    return LaunchOptions(
        target=ns.target, args=list(ns.args), module=ns.module, workers=ns.workers,
        chief=ns.chief, ps=ns.ps, evaluator=ns.evaluator, max_restarts=ns.max_restarts,
        host=ns.host, grace_seconds=ns.grace_seconds, timeout=ns.timeout,
        hosts=ns.hosts, node_rank=ns.node_rank, master_port=ns.master_port)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``distrib`` console script and ``python -m distrib``."""
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        result = launch(
            opts.target, opts.args, workers=opts.workers, chief=opts.chief, ps=opts.ps,
            evaluator=opts.evaluator, module=opts.module, max_restarts=opts.max_restarts,
            host=opts.host, grace_seconds=opts.grace_seconds, timeout=opts.timeout,
            hosts=opts.hosts, node_rank=opts.node_rank, master_port=opts.master_port)
    except LaunchTimeoutError:  # already reported; caught first: it is an OSError too
        return EXIT_TIMEOUT
    except (ValueError, OSError) as exc:
        print(str(exc) if str(exc).startswith("distrib launch:") else f"distrib launch: {exc}",
              file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return signal_exit_code(2)
    return result.returncode


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
