"""Start-up cost of the rendezvous store: torch's TCPStore vs distrib's AuthStore.

Hosts a store, connects ``--clients`` clients (as a job's workers and
heartbeat threads do) and does one set/get round trip on each; repeats and
prints the median time per system. Run: ``python bench/bench_store_startup.py``.
"""
from __future__ import annotations

import argparse
import socket
import statistics
import time
from datetime import timedelta

import torch.distributed as dist

from distrib.comm.auth_store import AuthStore, AuthStoreServer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tcpstore(clients: int) -> float:
    port = _free_port()
    start = time.perf_counter()
    master = dist.TCPStore("127.0.0.1", port, clients + 1, is_master=True,
                           timeout=timedelta(seconds=10), wait_for_workers=False)
    stores = [dist.TCPStore("127.0.0.1", port, clients + 1, is_master=False,
                            timeout=timedelta(seconds=10)) for _ in range(clients)]
    for i, s in enumerate(stores):
        s.set(f"k{i}", "v")
        master.get(f"k{i}")
    return time.perf_counter() - start


def authstore(clients: int) -> float:
    start = time.perf_counter()
    server = AuthStoreServer("127.0.0.1", 0, b"bench-secret")
    master = AuthStore("127.0.0.1", server.port, b"bench-secret", 10.0, server=server)
    stores = [AuthStore("127.0.0.1", server.port, b"bench-secret", 10.0) for _ in range(clients)]
    for i, s in enumerate(stores):
        s.set(f"k{i}", "v")
        master.get(f"k{i}")
    elapsed = time.perf_counter() - start
    for s in stores:
        s.close()
    master.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    for name, fn in (("TCPStore", tcpstore), ("AuthStore", authstore)):
        times = [fn(args.clients) for _ in range(args.reps)]
        print(f"{name:10s} median {statistics.median(times) * 1000:7.2f} ms  "
              f"min {min(times) * 1000:7.2f}  max {max(times) * 1000:7.2f}")


if __name__ == "__main__":
    main()
