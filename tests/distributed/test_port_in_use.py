"""A rendezvous port held by another program is named as such on every node, within seconds (issue 21).

Another program listens on the chief's port (and never answers). Two
``distrib launch`` nodes are started for a two-node job on 127.0.0.1: node 0
cannot listen there, node 1 reaches the other program instead of the chief.
Both must fail with `PortInUseError` naming ``host:port`` and their task --
not a `RendezvousTimeoutError` after the 60 s rendezvous timeout.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.timeout(180), pytest.mark.skipif(os.name != "posix", reason="POSIX only")]

SCRIPT = '''
import torch, distrib
strategy = distrib.MultiWorkerMirroredStrategy()
print("trained", float(strategy.reduce(distrib.ReduceOp.SUM, strategy.run(lambda: torch.ones(1)), axis=None)))
'''


def _held_port_with_free_successor():
    """A listening socket that never accepts, on port P where P+1 (node 1's task) is free."""
    for _ in range(50):
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.1", port + 1))
        except OSError:
            holder.close()
            continue
        finally:
            probe.close()
        holder.listen(16)
        return holder, port
    pytest.skip("no port pair found")


@pytest.mark.parametrize("secret", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["secret", "no-secret"])
def test_a_port_in_use_is_named_on_every_node(write_script, secret):
    script = write_script("job.py", SCRIPT)
    holder, port = _held_port_with_free_successor()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRIB_JOB_SECRET")}
    if secret:
        env["DISTRIB_JOB_SECRET"] = "s3cret-for-this-test-only-0123456789"
    try:
        nodes = [subprocess.Popen(
            [sys.executable, "-m", "distrib", "launch", "--hosts", "127.0.0.1,127.0.0.1",
             "--nproc_per_node", "1", "--node_rank", str(rank), "--master_port", str(port),
             str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for rank in (0, 1)]
        outputs = [node.communicate(timeout=150)[0] for node in nodes]
    finally:
        holder.close()
        for node in nodes:
            if node.poll() is None:
                node.kill()
    for rank, (node, text) in enumerate(zip(nodes, outputs)):
        assert node.returncode == 1, text
        assert "RendezvousTimeoutError" not in text and "trained" not in text, text
        summary = text.strip().splitlines()[-1]
        assert summary.startswith(f"distrib launch: worker {rank} failed with exit code 1 (PortInUseError: "
                                  f"worker {rank} (127.0.0.1:{port + rank})"), text
        assert f"127.0.0.1:{port}" in summary and "another program" in summary, summary
