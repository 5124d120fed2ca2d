"""Record what TensorFlow 2.21 does with the tf.data surface of `surface_scenarios.py`, as JSON.

Run with the TensorFlow virtual environment (never distrib's):

    bench/.tf-venv/bin/python tests/tf_reference/generate_surface.py

It writes ``tests/data/tf_reference/data_surface.json``:

* ``elements``: every pipeline's elements (one process, no strategy);
* ``metrics``: ``tf.keras.metrics`` Precision / Recall / TopKCategoricalAccuracy
  results on fixed inputs; ``lookup``: ``tf.keras.layers.StringLookup`` outputs;
* ``mirrored_2_devices`` and ``multi_worker_2_workers``: the text-file pipelines
  under each auto-shard policy (the elements each replica receives at each
  step, per worker) and ``experimental_distribute_values_from_function``'s
  per-replica values after ``strategy.run``.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "tf_reference" / "data_surface.json"
sys.path.insert(0, str(HERE))

from generate import _free_ports, _guard, _tf  # noqa: E402
from surface_scenarios import (LOOKUP_CASES, METRIC_CASES, METRIC_INPUTS, SHARD_POLICIES,  # noqa: E402
                               TEXT_PIPELINES, pipelines, plain, write_text_files)


class TFOps:
    def __init__(self, tf):
        self.tf = tf

    def upper(self, s):
        return self.tf.strings.upper(s)

    def fill_n(self, n):
        return self.tf.fill([n], n)

    def square_n(self, n):
        return self.tf.fill([n, n], n)

    def int64(self, v):
        return self.tf.constant(v, self.tf.int64)

    def spec(self, shape, dtype):
        return self.tf.TensorSpec(shape, getattr(self.tf, dtype))

    def dtype(self, name):
        return getattr(self.tf, name)


def elements(tf):
    out = {}
    for name, ds in pipelines(tf.data.Dataset, TFOps(tf)).items():
        out[name] = _guard(lambda ds=ds: [plain(e) for e in ds])
    return out


def metrics(tf):
    out = {}
    for name, (cls, kwargs, inputs, weighted) in METRIC_CASES.items():
        data = METRIC_INPUTS[inputs]
        m = getattr(tf.keras.metrics, cls)(**kwargs)
        m.update_state(data["y_true"], data["y_pred"], sample_weight=data["sample_weight"] if weighted else None)
        # a second update, so accumulation is compared too
        m.update_state(data["y_true"][::-1], data["y_pred"])
        out[name] = plain(m.result())
    return out


def lookups(tf):
    out = {}
    for name, (kwargs, inputs) in LOOKUP_CASES.items():
        layer = tf.keras.layers.StringLookup(**kwargs)
        out[name] = {"output": plain(layer(tf.constant(inputs))), "vocabulary": plain(layer.get_vocabulary())}
    return out


def _local(strategy, value):
    return [plain(v) for v in strategy.experimental_local_results(value)]


def distributed(tf, strategy, files, pattern):
    out = {"text": {}, "values": None}
    for policy in SHARD_POLICIES:
        for name, ds in TEXT_PIPELINES(tf.data.Dataset, tf.data.TextLineDataset, pattern, files).items():
            def run(ds=ds, policy=policy):
                opts = tf.data.Options()
                opts.experimental_distribute.auto_shard_policy = getattr(
                    tf.data.experimental.AutoShardPolicy, policy)
                return [_local(strategy, b) for b in strategy.experimental_distribute_dataset(ds.with_options(opts))]
            out["text"][f"{name}/{policy}"] = _guard(run)

    def value_fn(ctx):
        return tf.constant([ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync], tf.int64)

    def values():
        per_replica = strategy.experimental_distribute_values_from_function(value_fn)
        return {"values": _local(strategy, per_replica),
                "run": _local(strategy, strategy.run(lambda v: v * 10 + 1, args=(per_replica,)))}
    out["values"] = _guard(values)
    return out


def worker(index, ports, files, pattern, out_path):
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": index}})
    tf = _tf()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    Path(out_path).write_text(json.dumps(distributed(tf, strategy, files, pattern)))


def main():
    import tempfile

    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        _, _, index, ports, files, pattern, out_path = sys.argv
        worker(int(index), json.loads(ports), json.loads(files), pattern, out_path)
        return
    tmp = Path(tempfile.mkdtemp())
    files = write_text_files(tmp)
    pattern = str(tmp / "part-*.txt")
    ports = _free_ports(2)
    outs = [tmp / f"worker{i}.json" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, __file__, "worker", str(i), json.dumps(ports), json.dumps(files),
                               pattern, str(outs[i])]) for i in range(2)]
    for p in procs:
        if p.wait(timeout=900) != 0:
            raise SystemExit(f"TF worker exited with {p.returncode}")
    workers = [json.loads(o.read_text()) for o in outs]
    tf = _tf()
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    result = {"tensorflow": tf.__version__, "elements": elements(tf), "metrics": metrics(tf),
              "lookup": lookups(tf), "mirrored_2_devices": distributed(tf, mirrored, files, pattern),
              "multi_worker_2_workers": workers}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
