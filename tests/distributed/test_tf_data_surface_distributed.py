"""Text files through list_files / TextLineDataset and values_from_function, distributed, against TF 2.21.

Under each auto-shard policy, the elements every replica receives at every
step (FILE/AUTO: worker i reads files i, i+2, ...; DATA: each global batch
split among the replicas), and the per-replica values of
``experimental_distribute_values_from_function`` after ``strategy.run``, as
TensorFlow recorded them (tests/tf_reference/generate_surface.py).
"""
import json
import os
import sys
import textwrap
from pathlib import Path

from distrib.testing import run_cluster, run_python

TF_REFERENCE = str(Path(__file__).resolve().parents[1] / "tf_reference")
sys.path.insert(0, TF_REFERENCE)

from surface_scenarios import write_text_files  # noqa: E402

REFERENCE = json.loads((Path(TF_REFERENCE).parent / "data" / "tf_reference" / "data_surface.json").read_text())

MIRRORED_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import distrib
    from replay_surface import distributed
    strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    result = distributed(strategy, json.loads(sys.argv[2]), sys.argv[3])
    with open(sys.argv[4] + f".{strategy.replica_id}", "w") as f:
        json.dump(result, f)
""")


def _assert_same(want, have, where):
    for key, expected in want["text"].items():
        if "error" in expected:  # e.g. FILE on an in-memory source with several workers
            assert "error" in have["text"][key], f"{where} {key}: TF raised {expected}, distrib gave {have['text'][key]}"
        else:
            assert have["text"][key] == expected, f"{where} {key}"
    assert have["values"] == want["values"], f"{where} values_from_function"


def test_mirrored_two_devices_reads_files_and_values_as_tf(tmp_path):
    files = write_text_files(tmp_path)
    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED_SCRIPT)
    out = tmp_path / "out.json"
    proc = run_python([str(script), TF_REFERENCE, json.dumps(files),
                       str(tmp_path / "part-*.txt"), str(out)],
                      cwd=tmp_path, timeout=240,
                      env={k: v for k, v in os.environ.items() if k != "TF_CONFIG"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(2)]
    assert records[0] == records[1]  # each local replica sees the task's local results
    _assert_same(REFERENCE["mirrored_2_devices"], records[0], "mirrored")


def replay_on_worker(tf_reference, files, pattern):
    sys.path.insert(0, tf_reference)
    import distrib
    from replay_surface import distributed

    return distributed(distrib.MultiWorkerMirroredStrategy(), files, pattern)


def test_two_workers_shard_text_files_and_values_as_tf(tmp_path):
    files = write_text_files(tmp_path)
    results = run_cluster(replay_on_worker, num_workers=2, args=(TF_REFERENCE, files, str(tmp_path / "part-*.txt")),
                          timeout=240, env={"OMP_NUM_THREADS": "1"})
    for worker, (want, have) in enumerate(zip(REFERENCE["multi_worker_2_workers"], results)):
        _assert_same(want, have, f"worker {worker}")
