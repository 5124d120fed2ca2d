"""TFConfigClusterResolver: TF_CONFIG read as TensorFlow defines it; one named error per mistake."""
import json
import re

import pytest

from distrib.cluster import ClusterConfigError, ClusterSpec, TaskInfo, TFConfigClusterResolver

WORKERS = {"worker": ["localhost:12345", "localhost:23456"]}


def tf_config(cluster=WORKERS, task_type="worker", index=0, **extra):
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}, **extra})


def fails(config, message):
    """Asserts that TF_CONFIG text ``config`` fails with exactly one line containing ``message``."""
    with pytest.raises(ClusterConfigError, match=re.escape(message)) as info:
        TFConfigClusterResolver(environ={"TF_CONFIG": config})
    assert "\n" not in str(info.value)
    return str(info.value)


# ------------------------------------------------------------------ reading
def test_seed_config_is_read():
    r = TFConfigClusterResolver(environ={"TF_CONFIG": tf_config(index=1)})
    assert (r.task_type, r.task_id) == ("worker", 1)
    assert r.cluster_spec() == ClusterSpec(WORKERS)
    assert r.chief_address == "localhost:12345" and not r.is_chief
    assert r.rendezvous_address == ("localhost", 12345)


def test_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", tf_config(index=1))
    assert TFConfigClusterResolver().task_id == 1


def test_accepts_a_decoded_dict_and_ignores_environ():
    config = json.loads(tf_config(index=1))
    r = TFConfigClusterResolver(config, environ={"TF_CONFIG": "not json"})
    assert r.task_id == 1


def test_rpc_layer_and_environment():
    r = TFConfigClusterResolver(tf_config(rpc_layer="grpc", environment="cloud"))
    assert r.rpc_layer == "grpc" and r.environment == "cloud"
    assert r.master() == "grpc://localhost:12345"
    assert r.master("worker", 1, rpc_layer="") == "localhost:23456"
    plain = TFConfigClusterResolver(tf_config())
    assert plain.rpc_layer is None and plain.environment == ""


def test_unrelated_keys_from_tools_are_ignored():
    config = json.loads(tf_config())
    config["job"] = {"job_name": "x"}
    config["task"]["trial"] = "1"
    assert TFConfigClusterResolver(config).task == TaskInfo("worker", 0)


@pytest.mark.filterwarnings("ignore::distrib.cluster.tf_config.EmptyTFConfigWarning")
@pytest.mark.parametrize("text", [None, "", "   ", "{}", '{"cluster": {}}',
                                  '{"cluster": {}, "task": {}}'])
def test_empty_tf_config_is_single_process(text):
    env = {} if text is None else {"TF_CONFIG": text}
    r = TFConfigClusterResolver(environ=env)
    assert r.task_type is None and r.task_id is None and not r.cluster_spec()
    assert r.is_chief and r.rank == 0 and r.world_size == 1
    assert r.chief_task is None and r.chief_address is None and r.rendezvous_address is None


def test_sparse_worker_job_from_json():
    r = TFConfigClusterResolver(tf_config(cluster={"worker": {"1": "a:1", "3": "b:1"}}, index=3))
    assert r.task_id == 3 and r.rank == 1 and r.world_size == 2
    assert r.chief_task == TaskInfo("worker", 1) and r.chief_address == "a:1"


def test_evaluator_may_sit_beside_the_cluster_as_in_tensorflow():
    r = TFConfigClusterResolver(tf_config(task_type="evaluator", index=0))
    assert r.task == TaskInfo("evaluator", 0)
    assert r.rank is None and r.world_size == 2 and not r.is_chief
    fails(tf_config(task_type="evaluator", index=1),
          "TF_CONFIG['task']['index']: 1 is out of range for the single evaluator (valid 0)")


# ------------------------------------------------------------- malformed
def test_invalid_json_says_where():
    msg = fails('{"cluster": {"worker": ["a:1" "b:1"]}}',
                "TF_CONFIG: not valid JSON: Expecting ',' delimiter at line 1 column 31")
    assert '"a:1" <here> "b:1"' in msg


def test_invalid_json_single_quotes():
    fails("{'cluster': {}}", "TF_CONFIG: not valid JSON: Expecting property name enclosed in "
                             "double quotes at line 1 column 2")


def test_duplicate_json_key():
    fails('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, '
          '"task": {"type": "worker", "index": 1}}',
          "TF_CONFIG: key 'task' appears twice in one JSON object")


@pytest.mark.parametrize("text, kind", [("[1, 2]", "a list [1, 2]"), ('"worker"', 'a string'),
                                        ("3", "a number 3"), ("null", "null")])
def test_not_an_object(text, kind):
    fails(text, "TF_CONFIG: expected a JSON object like {\"cluster\": ")
    fails(text, f"got {kind}")


def test_missing_cluster():
    fails('{"task": {"type": "worker", "index": 0}}', "TF_CONFIG['cluster']: missing; TF_CONFIG "
                                                      "must look like")


def test_cluster_not_an_object():
    fails('{"cluster": ["a:1"], "task": {"type": "worker", "index": 0}}',
          "TF_CONFIG['cluster']: expected an object mapping job names to address lists")


def test_missing_task():
    fails(json.dumps({"cluster": WORKERS}),
          "TF_CONFIG['task']: missing; every process of a cluster needs its own")


def test_task_not_an_object():
    fails(json.dumps({"cluster": WORKERS, "task": "worker"}),
          "TF_CONFIG['task']: expected an object like {\"type\": \"worker\", \"index\": 0}, "
          "got a string \"worker\"")


def test_task_type_missing():
    fails(json.dumps({"cluster": WORKERS, "task": {"index": 0}}),
          "TF_CONFIG['task']['type']: missing; expected one of 'chief', 'worker', 'ps', 'evaluator'")


def test_task_type_unknown():
    fails(tf_config(task_type="wroker"),
          "TF_CONFIG['task']['type']: 'wroker' is not a task type; expected one of 'chief', "
          "'worker', 'ps', 'evaluator' (did you mean 'worker'?)")


def test_task_type_not_a_string():
    fails(tf_config(task_type=1), "TF_CONFIG['task']['type']: expected a string")


def test_task_type_absent_from_cluster():
    fails(tf_config(task_type="ps"),
          "TF_CONFIG['task']['type']: 'ps' is not a job in TF_CONFIG['cluster'] (jobs: 'worker')")
    fails(tf_config(cluster={}, task_type="worker"),
          "TF_CONFIG['task']['type']: 'worker' is not a job in TF_CONFIG['cluster'] (it is empty)")


def test_task_index_missing():
    fails(json.dumps({"cluster": WORKERS, "task": {"type": "worker"}}),
          "TF_CONFIG['task']['index']: missing; expected this task's integer index in job 'worker'")


def test_task_index_negative():
    fails(tf_config(index=-1), "TF_CONFIG['task']['index']: -1 is negative; task indices start at 0")


@pytest.mark.parametrize("index, shown", [
    ("1", 'a string "1" (write it without quotes)'), (1.0, "a number 1.0"),
    (True, "a boolean true"), (None, "null"), ([0], "a list [0]")])
def test_task_index_not_an_integer(index, shown):
    fails(tf_config(index=index), f"TF_CONFIG['task']['index']: expected an integer, got {shown}")


def test_task_index_out_of_range():
    fails(tf_config(index=2), "TF_CONFIG['task']['index']: 2 is out of range for job 'worker' "
                              "with 2 tasks (valid 0..1)")
    fails(tf_config(cluster={"chief": ["c:1"], "worker": ["w:1"]}, task_type="chief", index=1),
          "TF_CONFIG['task']['index']: 1 is out of range for job 'chief' with 1 task (valid 0..0)")


def test_task_index_not_in_sparse_job():
    fails(tf_config(cluster={"worker": {"1": "a:1", "3": "b:1"}}, index=2),
          "TF_CONFIG['task']['index']: 2 is not a task of job 'worker' (indices: 1, 3)")


def test_unknown_job_name():
    fails(tf_config(cluster={"worker": ["a:1"], "parameter_server": ["b:1"]}),
          "TF_CONFIG['cluster']: unknown job name \"parameter_server\"; expected one of 'chief', "
          "'worker', 'ps', 'evaluator'")


def test_empty_job_list():
    fails(tf_config(cluster={"worker": ["a:1"], "ps": []}),
          "TF_CONFIG['cluster']['ps']: job 'ps' has no tasks; list at least one 'host:port' or "
          "remove the job")


@pytest.mark.parametrize("address, problem", [
    ("localhost", "missing ':port'"), ("localhost:port", "port 'port' is not an integer"),
    ("localhost:70000", "port 70000 is out of range 1..65535"), (":1", "the host is empty"),
    ("::1:1", "an IPv6 host must be written in brackets"),
    ("grpc://localhost:1", "remove the 'grpc://' prefix")])
def test_malformed_host_port(address, problem):
    fails(tf_config(cluster={"worker": ["a:1", address]}),
          f"TF_CONFIG['cluster']['worker'][1]: {address!r} is not a valid 'host:port' address: "
          f"{problem}")


def test_address_not_a_string():
    fails(tf_config(cluster={"worker": ["a:1", None]}),
          "TF_CONFIG['cluster']['worker'][1]: expected a 'host:port' string, got null")
    fails(tf_config(cluster={"worker": ["a:1", 12]}),
          "TF_CONFIG['cluster']['worker'][1]: expected a 'host:port' string, got a number 12")


def test_duplicate_addresses():
    fails(tf_config(cluster={"chief": ["localhost:1"], "worker": ["localhost:2", "localhost:1"]}),
          "TF_CONFIG['cluster']['worker'][1]: address 'localhost:1' is already used by "
          "TF_CONFIG['cluster']['chief'][0]; every task needs its own 'host:port'")


def test_two_chiefs():
    fails(tf_config(cluster={"chief": ["a:1", "b:1"], "worker": ["c:1"]}),
          "TF_CONFIG['cluster']['chief']: has 2 tasks, but a cluster has at most one chief")


def test_rpc_layer_not_a_string():
    fails(tf_config(rpc_layer=3), "TF_CONFIG['rpc_layer']: expected a string, got a number 3")


def test_every_message_is_distinct():
    """Each malformed case gets its own message, not one generic error."""
    cases = [
        "{", "[]", '{"task": {}}', json.dumps({"cluster": WORKERS}),
        json.dumps({"cluster": WORKERS, "task": {"index": 0}}), tf_config(task_type="x"),
        tf_config(task_type="ps"), json.dumps({"cluster": WORKERS, "task": {"type": "worker"}}),
        tf_config(index=-1), tf_config(index="0"), tf_config(index=True), tf_config(index=5),
        tf_config(cluster={"wrk": ["a:1"]}), tf_config(cluster={"worker": []}),
        tf_config(cluster={"worker": ["a"]}), tf_config(cluster={"worker": ["a:1", "a:1"]}),
    ]
    messages = []
    for text in cases:
        with pytest.raises(ClusterConfigError) as info:
            TFConfigClusterResolver(text)
        messages.append(str(info.value))
    assert len(set(messages)) == len(cases)
    assert all(m.startswith("TF_CONFIG") for m in messages)


# ------------------------------------------------------- hostile input (issue 41)
@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_a_deeply_nested_tf_config_is_one_named_line(depth):
    """1,000 nested arrays (2 KB) used to end in a RecursionError traceback, in the resolver and
    in `resolve_cluster`'s emptiness check alike."""
    from distrib.cluster.resolve import resolve_cluster

    text = "[" * depth + "]" * depth
    message = fails(text, "TF_CONFIG: nested too deeply to be a cluster description")
    assert str(2 * depth) in message
    with pytest.raises(ClusterConfigError, match="nested too deeply"):
        resolve_cluster({"TF_CONFIG": text})
    nested_object = '{"cluster": ' * depth + "{}" + "}" * depth
    fails(nested_object, "nested too deeply")


@pytest.mark.parametrize("limit", [1_000, 5_000])
def test_the_nesting_error_does_not_depend_on_the_recursion_limit(limit):
    """Issue 50: after torch.compile raised ``sys.setrecursionlimit`` to 2000 in the same process,
    a 1,000-deep TF_CONFIG parsed and got the generic message; the parser now counts the depth itself."""
    import sys

    from distrib.cluster.tf_config import MAX_NESTING, tf_config_is_empty

    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        for depth in (MAX_NESTING + 1, 1_000):
            text = "[" * depth + "]" * depth
            fails(text, "TF_CONFIG: nested too deeply to be a cluster description")
            assert not tf_config_is_empty({"TF_CONFIG": text})
        brackets_in_a_string = '{"cluster": {"worker": ["' + "[" * 1_000 + '"]}}'
        deepest_allowed = "[" * MAX_NESTING + "]" * MAX_NESTING
        for text in (brackets_in_a_string, deepest_allowed):
            with pytest.raises(ClusterConfigError) as info:
                TFConfigClusterResolver(text)
            assert "nested too deeply" not in str(info.value)
    finally:
        sys.setrecursionlimit(before)


@pytest.mark.parametrize("layer, hint", [("grcp", "did you mean 'grpc'?"), ("http", ""),
                                         ("grpc+verb", "did you mean 'grpc+verbs'?")])
def test_an_unknown_rpc_layer_is_named(layer, hint):
    message = fails(tf_config(rpc_layer=layer), f"TF_CONFIG['rpc_layer']: {layer!r} is not an RPC layer "
                                                f"TensorFlow knows")
    assert hint in message and "'grpc'" in message


@pytest.mark.parametrize("layer", ["grpc", "grpc+verbs", "grpc+mpi", "grpc+gdr", ""])
def test_the_rpc_layers_tensorflow_knows_are_accepted(layer):
    assert TFConfigClusterResolver(tf_config(rpc_layer=layer)).rpc_layer == layer


@pytest.mark.parametrize("text", ["", "  ", "{}"])
def test_a_set_but_empty_tf_config_warns_through_resolve_cluster(text):
    """``""`` and ``{}`` used to give a single process without a word when the strategy resolved them."""
    from distrib.cluster.resolve import resolve_cluster
    from distrib.cluster.tf_config import EmptyTFConfigWarning

    with pytest.warns(EmptyTFConfigWarning, match="TF_CONFIG is set but empty") as caught:
        assert resolve_cluster({"TF_CONFIG": text}).world_size == 1
    assert len(caught) == 1


def test_an_unset_tf_config_says_nothing(recwarn):
    from distrib.cluster.resolve import resolve_cluster

    assert resolve_cluster({}).world_size == 1
    assert not [w for w in recwarn if "TF_CONFIG" in str(w.message)]


@pytest.mark.parametrize("text", ["", "{}"])
def test_a_set_but_empty_tf_config_is_one_line_on_stderr(text):
    """Issue 52: Python's warning output echoed distrib's source line under the message (two lines)."""
    import os

    from distrib.testing.harness import run_python

    env = dict(os.environ, TF_CONFIG=text, DISTRIB_LAUNCH_FORK="0")
    proc = run_python(["-c", "import distrib; distrib.MultiWorkerMirroredStrategy(); print('alone')"], env=env,
                      timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "alone", proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert f"EmptyTFConfigWarning: TF_CONFIG is set but empty ({text!r})" in lines[0]
