"""A user-space wire between namespace hosts, with delay and loss (where ``tc netem`` is missing).

Some kernels (minimal VMs) ship without ``sch_netem`` or tc actions, so a
link cannot be slowed down in the kernel. This module is the fallback: each
host gets a TAP device, and one process (this module's ``main``) opens every
TAP (entering each host's namespace only on the thread that opens it), then
acts as a hub: every frame a host sends reaches every other host after
``delay_ms``, or is dropped with probability ``loss_percent`` / 100. Like
netem on every host's egress, the round trip is twice the delay.

With ``--partition HOST:PORT:FILE``, once FILE exists every IPv4 TCP frame
host HOST sends is dropped unless it goes to port PORT: a one-way partition
where that host still reaches one service (the job's store) but nothing else.

Run by `distrib.testing.netns.NamespaceHosts` (``wire=True``); prints
``ready`` once every TAP is open, and runs until killed.

Example:
    python -m distrib.testing.wire --delay-ms 5 --loss-percent 1 host0ns:tap0 host1ns:tap1
"""
from __future__ import annotations

import argparse
import ctypes
import fcntl
import heapq
import os
import random
import select
import struct
import sys
import time
from typing import Dict, List, Sequence, Tuple

__all__ = ["open_tap", "run_hub", "main"]

_TUNSETIFF = 0x400454CA
_IFF_TAP, _IFF_NO_PI = 0x0002, 0x1000
_CLONE_NEWNET = 0x40000000
_FRAME = 65536 + 64


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def open_tap(namespace: str, tap: str) -> int:
    """Open the TAP device ``tap`` that lives in network namespace ``namespace``."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR)
            fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", tap.encode(), _IFF_TAP | _IFF_NO_PI))
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)
    os.set_blocking(fd, False)
    return fd


def _tcp_port(frame: bytes) -> int:
    """The TCP destination port of an Ethernet IPv4 frame; -1 for anything else (ARP, UDP, IPv6)."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != 6:
        return -1
    start = 14 + (frame[14] & 0x0F) * 4
    return int.from_bytes(frame[start + 2:start + 4], "big") if len(frame) >= start + 4 else -1


def run_hub(fds: Sequence[int], delay_s: float, loss: float, seed: int = 0,
            partition: Tuple[int, int, str] = (-1, 0, "")) -> None:
    """Forward frames between ``fds`` forever (see the module docstring)."""
    rng = random.Random(seed)
    cut_fd = fds[partition[0]] if partition[0] >= 0 else -1
    cut, checked = False, 0.0
    pending: List[Tuple[float, int, int, bytes]] = []  # (due, order, destination, frame)
    order = 0
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    while True:
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            _, _, dest, frame = heapq.heappop(pending)
            try:
                os.write(dest, frame)
            except OSError:
                pass  # the host's link is down or its queue is full: the frame is lost
        wait_ms = -1 if not pending else max(0, int((pending[0][0] - now) * 1000) + 1)
        for fd, _ in poller.poll(wait_ms):
            while True:
                try:
                    frame = os.read(fd, _FRAME)
                except BlockingIOError:
                    break
                except OSError:
                    break
                if fd == cut_fd and not cut and time.monotonic() - checked > 0.05:
                    checked, cut = time.monotonic(), os.path.exists(partition[2])
                if cut and fd == cut_fd and _tcp_port(frame) not in (-1, partition[1]):
                    continue  # partitioned: only the kept port gets through
                due = time.monotonic() + delay_s
                for dest in fds:
                    if dest != fd and not (loss and rng.random() < loss):
                        order += 1
                        if delay_s:
                            heapq.heappush(pending, (due, order, dest, frame))
                        else:
                            try:
                                os.write(dest, frame)
                            except OSError:
                                pass


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="user-space hub between namespace TAPs")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--loss-percent", type=float, default=0.0)
    parser.add_argument("--partition", default="", metavar="HOST:PORT:FILE")
    parser.add_argument("taps", nargs="+", metavar="NAMESPACE:TAP")
    ns = parser.parse_args(argv)
    fds: Dict[str, int] = {}
    for item in ns.taps:
        namespace, _, tap = item.partition(":")
        fds[item] = open_tap(namespace, tap)
    print("ready", flush=True)
    host, port, trigger = ns.partition.split(":", 2) if ns.partition else ("-1", "0", "")
    run_hub(list(fds.values()), ns.delay_ms / 1000.0, ns.loss_percent / 100.0,
            partition=(int(host), int(port), trigger))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
