"""Under torchrun, distrib uses the agent's store: no c10d "failed to bind" line, correct results."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from distrib.testing import free_port

pytestmark = [pytest.mark.timeout(180), pytest.mark.skipif(os.name != "posix", reason="POSIX only")]

SCRIPT = '''
import os
import sys
import torch
import distrib

strategy = distrib.MultiWorkerMirroredStrategy()
total = strategy.reduce(distrib.ReduceOp.SUM, strategy.run(lambda: torch.ones(1)), axis=None)
with open(os.path.join(sys.argv[1], "rank-" + os.environ["RANK"]), "w") as out:
    out.write(f"replicas {strategy.num_replicas_in_sync} sum {float(total)}")
'''


def test_torchrun_job_prints_no_bind_error(write_script, tmp_path):
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("torchrun not installed next to this interpreter")
    script = write_script("mw.py", SCRIPT)
    proc = subprocess.run([torchrun, "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                           "--master-port", str(free_port("127.0.0.1")), str(script), str(tmp_path)],
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr
    # one file per rank: the two ranks' prints would interleave on the shared stdout pipe
    results = [(tmp_path / f"rank-{r}").read_text() for r in range(2)]
    assert results == ["replicas 2 sum 2.0"] * 2, results
    assert "failed to bind" not in proc.stderr and "TCPStore" not in proc.stderr, proc.stderr
