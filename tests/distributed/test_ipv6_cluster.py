"""A cluster whose TF_CONFIG addresses are IPv6 literals (``[::1]:port``) trains."""
import json
import socket

import pytest

from distrib.launch.api import launch

pytestmark = pytest.mark.timeout(240)

SCRIPT = '''
import json, os
import torch
import distrib

strategy = distrib.MultiWorkerMirroredStrategy()
config = json.loads(os.environ["TF_CONFIG"])
total = strategy.reduce(distrib.ReduceOp.SUM, torch.tensor([float(strategy.replica_id + 1)]), axis=None)
print("RESULT", json.dumps({"workers": config["cluster"]["worker"], "sum": total.tolist(),
                            "ifname": os.environ.get("GLOO_SOCKET_IFNAME")}))
'''


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="this machine has no IPv6 loopback ::1")
def test_two_workers_on_ipv6_loopback(tmp_path):
    script = tmp_path / "ipv6.py"
    script.write_text(SCRIPT)
    result = launch(str(script), workers=2, host="::1", output="capture", timeout=200,
                    env={"OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.output[-3000:]
    reports = [json.loads(line.split("RESULT ", 1)[1]) for line in result.output.splitlines()
               if "RESULT " in line]
    assert len(reports) == 2
    for report in reports:
        assert all(w.startswith("[::1]:") for w in report["workers"]), report
        assert report["sum"] == [3.0]
        assert report["ifname"] == "lo"
