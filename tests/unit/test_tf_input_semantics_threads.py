"""distrib's input pipelines against TensorFlow 2.21's, replayed on threads (fast; see also
tests/distributed/test_tf_input_semantics.py for real processes).

The reference is ``tests/data/tf_reference/input_semantics.json``, written by
``tests/tf_reference/generate.py`` with TensorFlow; the same scenarios run here
through `distrib.testing.simulated.run_workers`, with the replicas grouped into
tasks as MirroredStrategy's devices (one task, two local replicas) or as two
MultiWorkerMirroredStrategy workers (two tasks, one replica each).
"""
import sys
from pathlib import Path

import pytest

from distrib.testing.simulated import run_workers

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


def test_central_storage_is_one_pipeline_as_in_tf():
    """CentralStorageStrategy's replicas split one pipeline like Mirrored's (DATA slicing, dataset functions)."""
    import distrib
    from distrib.data import Dataset
    from replay import _options
    from scenarios import FUNCTION_SCENARIOS, LOCAL_RESULTS, RANGE_SCENARIOS

    cs = distrib.experimental.CentralStorageStrategy(["cpu:0", "cpu:1"])
    want = REFERENCE["mirrored_2_devices"]

    def per_step(dist, fn=lambda t: t):
        return [[t.reshape(-1).tolist() for t in cs.experimental_local_results(cs.run(fn, (x,)))]
                for x in dist]

    for name, (n, batch) in RANGE_SCENARIOS.items():
        for policy in ("DATA", "AUTO"):
            ds = Dataset.range(n).batch(batch).with_options(_options(policy))
            assert per_step(cs.experimental_distribute_dataset(ds)) == want["range"][f"{name}/{policy}"]["steps"]
    for name, (n, batch) in LOCAL_RESULTS.items():
        dist = cs.experimental_distribute_dataset(Dataset.range(n).batch(batch))
        assert per_step(dist, lambda t: t * 10) == want["local_results"][name]["steps"]
    for name, (n, global_batch) in FUNCTION_SCENARIOS.items():
        contexts = []

        def fn(ctx, n=n, global_batch=global_batch):
            contexts.append([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync])
            return Dataset.range(n).shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(
                ctx.get_per_replica_batch_size(global_batch))

        assert per_step(cs.distribute_datasets_from_function(fn)) == want["function"][name]["steps"]
        tf_ctx = want["function"][name]["contexts"][0]
        assert contexts == [[tf_ctx["num_input_pipelines"], tf_ctx["input_pipeline_id"],
                             tf_ctx["num_replicas_in_sync"]]]


def test_a_model_built_outside_the_scope_is_refused_as_in_tf():
    """TF 2.21 fails to compile/fit under 2 replicas a model built outside any scope; distrib says why."""
    import torch

    import distrib

    assert "error" in REFERENCE["mirrored_2_devices"]["model_outside_scope"]
    strategy = distrib.experimental.CentralStorageStrategy(["cpu:0", "cpu:1"])   # 2 replicas, one process
    model = distrib.Model(torch.nn.Linear(2, 1))
    with pytest.raises(RuntimeError, match=r"create \(and compile\) the model inside the scope"):
        with strategy.scope():
            model.compile(loss="mse", optimizer="sgd")
