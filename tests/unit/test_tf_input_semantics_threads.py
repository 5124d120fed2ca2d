"""distrib's input pipelines against TensorFlow 2.21's, replayed on threads (fast; see also
tests/distributed/test_tf_input_semantics.py for real processes).

The reference is ``tests/data/tf_reference/input_semantics.json``, written by
``tests/tf_reference/generate.py`` with TensorFlow; the same scenarios run here
through `distrib.data.simulated.run_workers`, with the replicas grouped into
tasks as MirroredStrategy's devices (one task, two local replicas) or as two
MultiWorkerMirroredStrategy workers (two tasks, one replica each).
"""
import sys
from pathlib import Path

import pytest

from distrib.data.simulated import run_workers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tf_reference"))

from compare import REFERENCE, compare  # noqa: E402
from replay import record  # noqa: E402
from scenarios import SECTIONS, merge_workers, write_files  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("files"))


@pytest.fixture(scope="module")
def mirrored(files):
    one, two = run_workers(lambda s: record(s, files), 2, local_replicas=2)
    assert one == two  # both local replicas see the whole task's values
    return one


@pytest.fixture(scope="module")
def multi_worker(files):
    return merge_workers(run_workers(lambda s: record(s, files), 2))


def keys(setup):
    return [(section, key) for section in SECTIONS for key in REFERENCE[setup][section]]


@pytest.mark.parametrize("section,key", keys("mirrored_2_devices"))
def test_mirrored_two_devices_is_one_pipeline_as_in_tf(mirrored, section, key):
    compare("mirrored_2_devices", mirrored, section, key)


@pytest.mark.parametrize("section,key", keys("multi_worker_2_workers"))
def test_two_workers_are_two_pipelines_as_in_tf(multi_worker, section, key):
    compare("multi_worker_2_workers", multi_worker, section, key)


def test_the_reference_was_recorded_from_tensorflow():
    assert REFERENCE["tensorflow"].startswith("2.21")
    mirrored = REFERENCE["mirrored_2_devices"]
    assert mirrored["function"]["fn_range16_batch8"]["contexts"][0]["num_input_pipelines"] == 1
