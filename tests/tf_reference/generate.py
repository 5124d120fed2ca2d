"""Record what TensorFlow's tf.distribute does with input pipelines, as JSON for distrib's tests.

Run with a TensorFlow virtual environment (never distrib's):

    python3 -m venv bench/.tf-venv && bench/.tf-venv/bin/pip install tensorflow-cpu==2.21.0
    bench/.tf-venv/bin/python tests/tf_reference/generate.py

It writes ``tests/data/tf_reference/input_semantics.json``: for every scenario
in `scenarios.py` and two set-ups — ``MirroredStrategy(["cpu:0", "cpu:1"])``
in one process and ``MultiWorkerMirroredStrategy`` with two worker processes
on localhost — the elements each replica receives at each step (or the
error TensorFlow raised), the `InputContext` a dataset function sees, and
what ``experimental_local_results`` returns.
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "tf_reference" / "input_semantics.json"
sys.path.insert(0, str(HERE))

from scenarios import (FILE_SCENARIOS, FUNCTION_SCENARIOS, LOCAL_RESULTS, POLICIES, SHUFFLE_SCENARIOS,  # noqa: E402
                       RANGE_SCENARIOS, merge_workers, write_files)


def _tf():
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf


def _policy(tf, name):
    return getattr(tf.data.experimental.AutoShardPolicy, name)


def _values(strategy, per_replica):
    return [t.numpy().reshape(-1).astype(int).tolist() for t in strategy.experimental_local_results(per_replica)]


def _steps(strategy, dist):
    """[step][local replica] -> list of ints."""
    steps = []
    for batch in dist:
        steps.append(_values(strategy, batch))
        if len(steps) > 100:
            raise RuntimeError("runaway")
    return steps


def _guard(fn):
    try:
        return {"steps": fn()}
    except Exception as exc:  # TF's own error, recorded as the behaviour to match
        return {"error": type(exc).__name__, "message": (str(exc).splitlines() or [""])[0][:300]}


def record(tf, strategy, files):
    out = {"num_replicas_in_sync": strategy.num_replicas_in_sync, "range": {}, "shuffle": {}, "files": {},
           "function": {}, "local_results": {}}
    for name, (n, batch) in RANGE_SCENARIOS.items():
        for policy in POLICIES:
            def run(n=n, batch=batch, policy=policy):
                ds = tf.data.Dataset.range(n).batch(batch)
                opts = tf.data.Options()
                opts.experimental_distribute.auto_shard_policy = _policy(tf, policy)
                return _steps(strategy, strategy.experimental_distribute_dataset(ds.with_options(opts)))
            out["range"][f"{name}/{policy}"] = _guard(run)
    for name, (n, buffer, batch) in SHUFFLE_SCENARIOS.items():
        for policy in ("DATA", "OFF"):
            def run(n=n, buffer=buffer, batch=batch, policy=policy):
                ds = tf.data.Dataset.range(n).shuffle(buffer).batch(batch)
                opts = tf.data.Options()
                opts.experimental_distribute.auto_shard_policy = _policy(tf, policy)
                dist = strategy.experimental_distribute_dataset(ds.with_options(opts))
                return [_steps(strategy, dist) for _ in range(2)]
            out["shuffle"][f"{name}/{policy}"] = _guard(run)
    for name, batch in FILE_SCENARIOS.items():
        for policy in POLICIES:
            def run(batch=batch, policy=policy):
                ds = tf.data.Dataset.from_tensor_slices(files)
                ds = ds.interleave(tf.data.TextLineDataset, cycle_length=1)
                ds = ds.map(lambda s: tf.strings.to_number(s, tf.int64)).batch(batch)
                opts = tf.data.Options()
                opts.experimental_distribute.auto_shard_policy = _policy(tf, policy)
                return _steps(strategy, strategy.experimental_distribute_dataset(ds.with_options(opts)))
            out["files"][f"{name}/{policy}"] = _guard(run)
    for name, (n, global_batch) in FUNCTION_SCENARIOS.items():
        seen = []

        def fn(ctx, n=n, global_batch=global_batch):
            seen.append({"num_input_pipelines": ctx.num_input_pipelines,
                         "input_pipeline_id": ctx.input_pipeline_id,
                         "num_replicas_in_sync": ctx.num_replicas_in_sync,
                         "per_replica_batch": ctx.get_per_replica_batch_size(global_batch)})
            ds = tf.data.Dataset.range(n).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            return ds.batch(ctx.get_per_replica_batch_size(global_batch))

        result = _guard(lambda: _steps(strategy, strategy.distribute_datasets_from_function(fn)))
        result["contexts"] = seen
        out["function"][name] = result
    for name, (n, batch) in LOCAL_RESULTS.items():
        def run(n=n, batch=batch):
            dist = strategy.experimental_distribute_dataset(tf.data.Dataset.range(n).batch(batch))
            steps = []
            for x in dist:
                result = strategy.run(lambda t: t * 10, args=(x,))
                steps.append(_values(strategy, result))
            return steps
        out["local_results"][name] = _guard(run)
    return out


def mirrored(files):
    tf = _tf()
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    out = record(tf, strategy, files)
    out["model_outside_scope"] = _guard(lambda: _fit_model_built_outside(tf, strategy))
    return out


def _fit_model_built_outside(tf, strategy):
    """A Keras model built outside any scope, then compiled and fit under the strategy."""
    import numpy as np

    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    with strategy.scope():
        model.compile(loss="mse", optimizer="sgd")
    x = np.arange(16.0, dtype="float32").reshape(8, 2)
    model.fit(x, x.sum(1, keepdims=True), batch_size=4, epochs=1, verbose=0)
    return []


def worker(index, ports, files, out_path):
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": index}})
    tf = _tf()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    Path(out_path).write_text(json.dumps(record(tf, strategy, files)))


def _free_ports(k):
    socks = [socket.socket() for _ in range(k)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def main():
    import tempfile

    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        _, _, index, ports, files, out_path = sys.argv
        worker(int(index), json.loads(ports), json.loads(files), out_path)
        return
    tmp = Path(tempfile.mkdtemp())
    files = write_files(tmp)
    result = {"tensorflow": None, "mirrored_2_devices": None, "multi_worker_2_workers": None}
    ports = _free_ports(2)
    outs = [tmp / f"worker{i}.json" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, __file__, "worker", str(i), json.dumps(ports),
                               json.dumps(files), str(outs[i])]) for i in range(2)]
    for p in procs:
        if p.wait(timeout=900) != 0:
            raise SystemExit(f"TF worker exited with {p.returncode}")
    result["multi_worker_2_workers"] = merge_workers([json.loads(o.read_text()) for o in outs])
    import tensorflow as tf

    result["tensorflow"] = tf.__version__
    result["mirrored_2_devices"] = mirrored(files)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
