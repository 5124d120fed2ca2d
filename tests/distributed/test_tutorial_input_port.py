"""TF's "Distributed input" tutorial, ported (examples/tutorial_distributed_input.py), in three set-ups.

Alone (1 replica), as ``MirroredStrategy`` with two local CPU devices (by
``--devices 2`` and by ``DISTRIB_LOCAL_DEVICES``), and under
``distrib launch --workers 2``; the assertions read what the script prints
and compare every printed value with what TensorFlow 2.21 prints for the
same cells (``tests/data/tf_reference/tutorial_distributed_input.json``,
written by ``tests/tf_reference/generate_tutorials.py``).
"""
import ast
import json
import os
import re
from pathlib import Path

import pytest

from distrib.testing import run_python, run_script

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tutorial_distributed_input.py"
TF_REFERENCE = Path(__file__).resolve().parents[1] / "data" / "tf_reference" / "tutorial_distributed_input.json"


def _tf(mode):
    return json.loads(TF_REFERENCE.read_text())[mode]


def _plain(value):
    """Tuples as lists, dict keys as strings: what the JSON reference holds."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _matches_tensorflow(output, tf_record):
    """Every value TF printed, printed alike by the port (and as many ``Loss is`` lines)."""
    for key, values in tf_record.items():
        if key == "Loss is":
            assert len(re.findall(r"^Loss is", output, re.M)) == values[0]
        else:
            assert [_plain(v) for v in _lines(output, key + ":")] == values, key


def _run(args=(), env=None):
    base = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "DISTRIB_LOCAL_DEVICES")}
    proc = run_python([str(EXAMPLE), *args], env={**base, **(env or {})}, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _lines(output, prefix):
    return [ast.literal_eval(line[len(prefix):].strip()) for line in output.splitlines() if line.startswith(prefix)]


def _predicted(output):
    (result,) = _lines(output, "predict with index:")
    return result


def test_alone_is_one_replica():
    out = _run()
    assert _lines(out, "num_replicas_in_sync:") == [1]
    assert _lines(out, "first batch:") == [(((16, 1), (16, 1)),)]
    assert _lines(out, "optional:") == [[[0, 1, 2, 3]], [[4, 5, 6, 7]], [[8]]]
    assert _lines(out, "lookup:") == [[[1, 3, 0, 1]], [[3, 0, 1, 3]], [[0, 1, 3, 0]]]   # a, c, e(OOV)
    assert _predicted(out) == {i: 2 * i for i in range(24)}
    _matches_tensorflow(out, _tf("alone"))
    assert _lines(out, "values:") == [[0]] * 4
    assert _lines(out, "generator:") == [((4,),)] * 4
    assert len(re.findall(r"^Loss is", out, re.M)) == 7 + 50     # for-loop over 100/16 batches, then 10 x 5 steps


@pytest.mark.parametrize("how", ["devices", pytest.param("env", marks=pytest.mark.slow)])
def test_mirrored_two_local_devices(how):
    out = _run(["--devices", "2"]) if how == "devices" else _run(env={"DISTRIB_LOCAL_DEVICES": "cpu:0,cpu:1"})
    assert _lines(out, "num_replicas_in_sync:") == [2]                  # replica 0 prints, once
    assert _lines(out, "first batch:") == [(((8, 1), (8, 1)), ((8, 1), (8, 1)))]
    assert _lines(out, "optional:") == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8], []]]
    # dataset_fn: one pipeline, batches of 2 dealt to the two local replicas in turn
    assert _lines(out, "lookup:") == [[[1, 3], [0, 1]], [[3, 0], [1, 3]], [[0, 1], [3, 0]]]
    assert _predicted(out) == {i: 2 * i for i in range(24)}                  # local results keep all
    _matches_tensorflow(out, _tf("mirrored_2_devices"))
    assert _lines(out, "values:") == [[0, 1]] * 4
    assert _lines(out, "generator:") == [((2,), (2,))] * 4


def test_two_workers_under_launch():
    result = run_script(str(EXAMPLE), num_workers=2, timeout=300, env={"OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.output[-3000:]
    outs = [result.outputs[f"worker {w}"] for w in range(2)]
    for out, tf_worker in zip(outs, _tf("multi_worker_2_workers")):
        _matches_tensorflow(out, tf_worker)
    for w, out in enumerate(outs):
        assert _lines(out, "num_replicas_in_sync:") == [2]
        assert _lines(out, "values:") == [[w]] * 4                       # replica id per worker
        assert _lines(out, "generator:") == [((2,),)] * 4
    # DATA sharding: each worker holds half of every global batch; together, every prediction
    predicted = [_predicted(out) for out in outs]
    assert not set(predicted[0]) & set(predicted[1])
    assert {**predicted[0], **predicted[1]} == {i: 2 * i for i in range(24)}
    assert [len(p) for p in predicted] == [12, 12]
    assert _lines(outs[0], "optional:") == [[[0, 1]], [[4, 5]], [[8]]]
    assert _lines(outs[1], "optional:") == [[[2, 3]], [[6, 7]], [[]]]
    # dataset_fn under 2 workers: batches of 2 of a, c, e, a, ... ([a c] [e a] [c e] ...), worker w keeps
    # batches w, w+2, ...: a->1, c->3, e->0 (out of vocabulary)
    assert _lines(outs[0], "lookup:") == [[[1, 3]], [[3, 0]], [[0, 1]]]
    assert _lines(outs[1], "lookup:") == [[[0, 1]], [[1, 3]], [[3, 0]]]
