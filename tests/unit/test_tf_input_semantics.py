"""distrib's input pipelines against TensorFlow 2.21's, replayed on threads (fast; see also
tests/distributed/test_tf_input_semantics.py for real processes).

The reference is ``tests/data/tf_reference/input_semantics.json``, written by
``tests/tf_reference/generate.py`` with TensorFlow; the same scenarios run here
through `distrib.data.simulated.run_workers`, with the replicas grouped into
tasks as MirroredStrategy's devices (one task, two local replicas) or as two
MultiWorkerMirroredStrategy workers (two tasks, one replica each).
"""
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from distrib.data.simulated import run_workers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tf_reference"))

from replay import record  # noqa: E402
from scenarios import SECTIONS, merge_workers, write_files  # noqa: E402

REFERENCE = json.loads((ROOT / "data" / "tf_reference" / "input_semantics.json").read_text())


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


def compare(setup, got, section, key):
    """Assert distrib's record of one scenario equals TensorFlow's."""
    want = REFERENCE[setup][section][key]
    have = got[section][key]
    where = f"{setup} {section} {key}"
    if "errors" in want or "error" in want:
        errors = have.get("errors") or [have.get("error")]
        assert all(errors), f"{where}: TensorFlow raised {want}, distrib gave {have}"
        return
    assert "steps" in have, f"{where}: distrib raised {have}"
    if section == "shuffle":
        compare_shuffled(where, want, have)
    else:
        assert have["steps"] == want["steps"], where
    if "contexts" in want:
        assert have["contexts"] == want["contexts"], where


def compare_shuffled(where, want, have):
    """Unseeded shuffles: the order is distrib's own; sizes per step and each pass's examples match.

    Under DATA, TF shuffles each worker's copy with its own seed, so workers can
    repeat or miss examples; distrib agrees one seed, so the workers' slices of
    a pass together hold every example once. Under OFF each worker's pass holds
    every example once in both.
    """
    wanted = want.get("per_worker_steps", [want["steps"]])
    had = have.get("per_worker_steps", [have["steps"]])
    flat = lambda p: Counter(v for step in p for r in step for v in r)  # noqa: E731
    for w_passes, h_passes in zip(wanted, had):
        assert len(h_passes) == len(w_passes) == 2, where
        for w_pass, h_pass in zip(w_passes, h_passes):
            assert [[len(r) for r in step] for step in h_pass] == [[len(r) for r in step] for step in w_pass], where
            if where.endswith("/OFF"):
                assert flat(h_pass) == flat(w_pass), where
    if where.endswith("/DATA"):
        for p in range(2):
            everyone = sum((flat(passes[p]) for passes in had), Counter())
            assert everyone == Counter(range(sum(everyone.values()))), where
            assert sum(everyone.values()) == sum(sum(flat(passes[p]).values()) for passes in wanted), where
    assert had[0][0] != had[0][1], f"{where}: the second pass is not reshuffled"


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
