"""Item 17.2 with real worker processes: tasks started from TF_CONFIG alone (no LOCAL_RANK) on
one host that (we pretend) has GPUs. Each task fakes torch's view of CUDA before building the
strategy, so the check runs without a GPU; it happens before any NCCL call would be made."""
import pytest

from distrib.testing import run_script

pytestmark = pytest.mark.timeout(300)

SCRIPT = '''
import sys
import torch
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: int(sys.argv[1])

import distrib
impl = getattr(distrib.CommunicationImplementation, sys.argv[2])
strategy = distrib.MultiWorkerMirroredStrategy(
    communication_options=distrib.CommunicationOptions(implementation=impl, timeout_seconds=30))
print("device", strategy.replica_id, strategy.device, torch.distributed.get_backend(), flush=True)
'''


def _run(tmp_path, gpus, implementation):
    script = tmp_path / "gpus.py"
    script.write_text(SCRIPT)
    return run_script(str(script), 2, args=[gpus, implementation], timeout=120,
                      env={"LOCAL_RANK": None, "SLURM_LOCALID": None, "CUDA_VISIBLE_DEVICES": None})


def test_nccl_with_two_tasks_on_one_gpu_stops_before_any_collective(tmp_path):
    result = _run(tmp_path, 1, "NCCL")
    assert result.returncode != 0, result.output
    for task in ("worker 0", "worker 1"):
        assert "would both use GPU 0 on host" in result.outputs[task], result.output
    assert "NCCL error" not in result.output


def test_auto_with_two_tasks_on_one_gpu_falls_back_to_gloo_and_says_so(tmp_path):
    result = _run(tmp_path, 1, "AUTO")
    assert result.returncode == 0, result.output
    assert "device 0 cuda:0 gloo" in result.outputs["worker 0"]
    assert "device 1 cuda:0 gloo" in result.outputs["worker 1"]
    assert "so the job uses gloo instead" in result.outputs["worker 0"]
