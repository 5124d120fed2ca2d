"""TF_CONFIG: a misspelt key is named with the key it was meant to be; the error's task label is sane."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from distrib.cluster import TFConfigClusterResolver
from distrib.cluster.errors import ClusterConfigError
from distrib.error_report import task_label

CLUSTER = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}


@pytest.mark.parametrize("config, message", [
    ({"cluster": CLUSTER, "task": {"tpye": "worker", "index": 0}},
     "TF_CONFIG['task']: unknown key 'tpye' (did you mean 'type'?)"),
    ({"cluster": CLUSTER, "task": {"type": "worker", "indx": 0}},
     "TF_CONFIG['task']: unknown key 'indx' (did you mean 'index'?)"),
    ({"cluster": CLUSTER, "task": {"Type": "worker", "index": 0}},
     "TF_CONFIG['task']: unknown key 'Type' (did you mean 'type'?)"),
    ({"clustre": CLUSTER, "task": {"type": "worker", "index": 0}},
     "TF_CONFIG: unknown key 'clustre' (did you mean 'cluster'?)"),
    ({"cluster": CLUSTER, "tsak": {"type": "worker", "index": 0}},
     "TF_CONFIG: unknown key 'tsak' (did you mean 'task'?)"),
    ({"cluster": CLUSTER, "task": {"type": "worker", "index": 0}, "rpc_layr": "grpc"},
     "TF_CONFIG: unknown key 'rpc_layr' (did you mean 'rpc_layer'?)"),
])
def test_a_near_miss_key_is_named_with_its_suggestion(config, message):
    with pytest.raises(ClusterConfigError) as info:
        TFConfigClusterResolver(json.dumps(config))
    assert str(info.value) == message


def test_keys_tools_add_and_unrelated_keys_are_still_ignored_as_in_tensorflow():
    config = {"cluster": CLUSTER, "task": {"type": "worker", "index": 1, "trial": "7"},
              "job": "x", "my_launcher_metadata": {"a": 1}}
    resolver = TFConfigClusterResolver(json.dumps(config))
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)


@pytest.mark.parametrize("task, label", [
    ({"type": "worker", "index": 1}, "worker 1"),
    ({"type": "worker", "index": True}, "a worker task"),
    ({"type": "worker", "index": "1"}, "a worker task"),
    ({"type": "worker", "index": -1}, "a worker task"),
    ({"type": "worker"}, "a worker task"),
    ({"type": "wrker", "index": 0}, "this process"),
    ({"type": ["x"], "index": 0}, "this process"),
    ({"tpye": "worker", "index": 0}, "this process"),
])
def test_the_label_never_repeats_the_invalid_value(task, label):
    assert task_label({"TF_CONFIG": json.dumps({"cluster": CLUSTER, "task": task})}) == label


def test_an_invalid_index_is_one_line_labelled_by_the_task_type():
    config = json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": True}})
    proc = subprocess.run([sys.executable, "-c", "import distrib; distrib.MultiWorkerMirroredStrategy()"],
                          env={**__import__("os").environ, "TF_CONFIG": config},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "distrib: a worker task: ClusterConfigError: TF_CONFIG['task']['index']: expected an integer, "
        "got a boolean true (full traceback: set DISTRIB_VERBOSE=1 or use distrib launch --verbose)"]
