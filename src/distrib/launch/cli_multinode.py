"""The torchrun-style options of a launch across several machines, and their checks.

``--hosts``, ``--nnodes``, ``--node-rank``, ``--master-addr``, ``--master-port``
and ``--nproc-per-node`` (with torchrun's underscore spellings) are added to
``distrib launch`` by `add_multinode_flags` and checked against each other by
`check_multinode`, which also turns ``--workers MIN:MAX`` into the number of
workers that start the job.
"""
from __future__ import annotations

import argparse

from distrib.launch.config import DEFAULT_MASTER_PORT
from distrib.launch.cli_types import count, count_or_range, port, range_text

__all__ = ["add_multinode_flags", "check_multinode", "DEFAULT_MASTER_PORT"]

"""First port of a multi-node cluster when ``--master-port`` is not given (torchrun's)."""


def add_multinode_flags(run: argparse.ArgumentParser) -> None:
    """The torchrun-style flags of a launch across several machines."""
    nodes = run.add_argument_group(
        "several machines", "Run the same command on every node with its own --node-rank; "
        "node i starts workers i*P .. i*P+P-1 (P = --nproc-per-node) on ports "
        "--master-port + global index; worker 0 on the first host is the chief.")
    nodes.add_argument("--hosts", default=None, metavar="H1,H2,...",
                       help="address of every node, the same list on every node")
    nodes.add_argument("--nnodes", type=count_or_range, default=None, metavar="N|MIN:MAX",
                       help="number of nodes (default: the number of --hosts); MIN:MAX with --elastic: "
                            "nodes 0..MIN-1 start the job, a later node joins it when its launcher starts")
    nodes.add_argument("--node-rank", "--node_rank", type=count, default=0, metavar="I",
                       help="this node's index in --hosts (default: 0)")
    nodes.add_argument("--master-addr", "--master_addr", default=None, metavar="HOST",
                       help="the chief's host; must be the first of --hosts")
    nodes.add_argument("--master-port", "--master_port", type=port, default=None, metavar="PORT",
                       help=f"the chief's port, first of the cluster's ports "
                            f"(default: {DEFAULT_MASTER_PORT})")
    nodes.add_argument("--nproc-per-node", "--nproc_per_node", type=count, default=None,
                       metavar="P", help="worker tasks per node (same as --workers)")


def check_multinode(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Check the multi-node flags against each other; fill ``ns.hosts``, ``ns.workers``, ``ns.start_workers``."""
    start_workers, ns.workers = ns.workers
    start_nodes, nnodes = ns.nnodes if ns.nnodes is not None else (None, None)
    ns.nnodes = nnodes
    if ns.nproc_per_node is not None:
        if ns.workers not in (1, ns.nproc_per_node) or start_workers != ns.workers:
            parser.error(f"--nproc-per-node {ns.nproc_per_node} and --workers {range_text(start_workers, ns.workers)} "
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
