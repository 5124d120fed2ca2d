"""Item 17.4 with real processes: 8 workers on a 2-core machine (more processes than cores, so
start-up is slow and uneven) all start, every launch."""
import pytest
import torch

from distrib.testing import run_cluster

pytestmark = pytest.mark.timeout(1200)
WORKERS = 8


def start_and_reduce():
    import distrib

    strategy = distrib.MultiWorkerMirroredStrategy()
    return strategy.reduce(distrib.ReduceOp.SUM, torch.tensor(float(strategy.replica_id + 1)), axis=None)


def _launch_all(times):
    for _ in range(times):
        values = run_cluster(start_and_reduce, num_workers=WORKERS, timeout=240,
                             env={"OMP_NUM_THREADS": "1"})
        assert values == [pytest.approx(WORKERS * (WORKERS + 1) / 2)] * WORKERS


def test_eight_workers_start():
    _launch_all(1)  # two launches took ~65 s on the 2 shared cores: the repeated runs are slow-marked


@pytest.mark.slow
def test_eight_workers_start_ten_times():
    _launch_all(10)
