"""distrib's input pipelines against TensorFlow 2.21's, in real replica processes.

The same scenarios as tests/unit/test_tf_input_semantics_threads.py (see
tests/tf_reference/), run by ``MirroredStrategy(["cpu:0", "cpu:1"])`` from a
plain script (two replica processes, one input pipeline) and by two
``MultiWorkerMirroredStrategy`` workers, and compared with what TensorFlow
recorded for the same programs.
"""
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from distrib.testing import run_cluster, run_python

TF_REFERENCE = str(Path(__file__).resolve().parents[1] / "tf_reference")
sys.path.insert(0, TF_REFERENCE)

from compare import REFERENCE, compare  # noqa: E402
from scenarios import SECTIONS, merge_workers, write_files  # noqa: E402

MIRRORED_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import distrib
    from replay import record
    strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    result = record(strategy, json.loads(sys.argv[2]))
    result["placement"] = [strategy.replica_id, strategy.input_context().num_input_pipelines]
    import torch
    r = strategy.replica_id
    mixed = strategy.experimental_local_results(
        {"rows": torch.full((r + 1, 2), float(r)), "id": r, "ok": torch.tensor([r == 1])})
    result["structure"] = [{"rows": m["rows"].tolist(), "id": m["id"], "ok": m["ok"].tolist()} for m in mixed]
    with open(sys.argv[3] + f".{strategy.replica_id}", "w") as f:
        json.dump(result, f)
""")


def _all_keys(setup):
    return [(section, key) for section in SECTIONS for key in REFERENCE[setup][section]]


def test_mirrored_two_devices_in_two_processes_behaves_as_tf(tmp_path):
    files = write_files(tmp_path)
    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED_SCRIPT)
    out = tmp_path / "out.json"
    proc = run_python([str(script), TF_REFERENCE, json.dumps(files), str(out)],
                      cwd=tmp_path, timeout=240,
                      env={**{k: v for k, v in os.environ.items() if k != "TF_CONFIG"}, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(2)]
    assert [r.pop("placement") for r in records] == [[0, 1], [1, 1]]
    # structures of differently shaped tensors, numbers and bools, in local replica order
    assert records[0]["structure"] == [{"rows": [[0.0, 0.0]], "id": 0, "ok": [False]},
                                       {"rows": [[1.0, 1.0], [1.0, 1.0]], "id": 1, "ok": [True]}]
    assert records[0] == records[1]  # every local replica sees the whole task's local results
    for section, key in _all_keys("mirrored_2_devices"):
        compare("mirrored_2_devices", records[0], section, key)


def replay_on_worker(tf_reference, files):
    sys.path.insert(0, tf_reference)
    import distrib
    from replay import record

    return record(distrib.MultiWorkerMirroredStrategy(), files)


def test_two_workers_behave_as_tf(tmp_path):
    files = write_files(tmp_path)
    results = run_cluster(replay_on_worker, num_workers=2, args=(TF_REFERENCE, files), timeout=240,
                          env={"OMP_NUM_THREADS": "1"})
    merged = merge_workers(results)
    for section, key in _all_keys("multi_worker_2_workers"):
        compare("multi_worker_2_workers", merged, section, key)


def two_by_two(tf_reference):
    sys.path.insert(0, tf_reference)
    import distrib
    from distrib.data import Dataset

    strategy = distrib.MultiWorkerMirroredStrategy()
    contexts = []

    def fn(ctx):
        contexts.append([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync])
        return Dataset.range(16).shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(
            ctx.get_per_replica_batch_size(8))

    data = [[t.tolist() for t in strategy.experimental_local_results(x)]
            for x in strategy.experimental_distribute_dataset(Dataset.range(16).batch(8))]
    function = [[t.tolist() for t in strategy.experimental_local_results(x)]
                for x in strategy.distribute_datasets_from_function(fn)]
    return {"replica": strategy.replica_id, "contexts": contexts, "data": data, "function": function}


@pytest.mark.slow
def test_two_workers_with_two_local_devices_have_two_pipelines(tmp_path):
    results = run_cluster(two_by_two, num_workers=2, args=(TF_REFERENCE,), timeout=240,
                          env={"DISTRIB_LOCAL_DEVICES": "cpu:0,cpu:1", "OMP_NUM_THREADS": "1"})
    assert [r["replica"] for r in results] == [0, 2]
    assert [r["contexts"] for r in results] == [[[2, 0, 4]], [[2, 1, 4]]]
    for step in range(2):  # DATA: the four replicas' slices, in replica order, are the global batch
        together = results[0]["data"][step] + results[1]["data"][step]
        assert [len(part) for part in together] == [2, 2, 2, 2]
        assert sum(together, []) == list(range(8 * step, 8 * step + 8))
    # one pipeline per worker, its elements dealt to its two local replicas in turn
    for worker, result in enumerate(results):
        mine = list(range(worker, 16, 2))
        assert sum(sum(result["function"], []), []) == mine
        assert all(len(step) == 2 for step in result["function"])
