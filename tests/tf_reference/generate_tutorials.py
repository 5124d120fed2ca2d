"""Record what TF's distribute tutorials print under TensorFlow 2.21, as JSON.

Run with the TensorFlow virtual environment (never distrib's), with one
argument saying which tutorial:

    /work/tf-venv/bin/python tests/tf_reference/generate_tutorials.py [keras|custom_training|save_and_load|parameter_server]

* (none): runs `tutorial_input_tf.py` three ways and writes
  ``tutorial_distributed_input.json``: ``alone`` (MirroredStrategy on one
  CPU), ``mirrored_2_devices`` (2 virtual CPUs) and ``multi_worker_2_workers``
  (a list: each worker's lines, worker 0 first).
* ``keras``: `tutorial_keras_tf.py` (the learning rates) and
  `tutorial_keras_fit_tf.py` (the whole tutorial) on one CPU (``alone``) and
  on 2 virtual CPUs (``mirrored_2_devices``), 512 examples per replica;
  writes ``tutorial_keras_distributed.json``.
* ``save_and_load``: `tutorial_save_and_load_tf.py` the same two ways;
  writes ``tutorial_save_and_load.json``.
* ``custom_training``: `tutorial_custom_training_tf.py` on 2 virtual CPUs,
  once as TensorFlow runs by default and once with oneDNN off
  (``mirrored_2_devices_onednn_off``: other kernels, another float summation
  order — how far TensorFlow drifts from itself); writes
  ``tutorial_custom_training.json``.
* ``parameter_server``: `tutorial_parameter_server_tf.py`, the port's
  one-worker run (see there why on TensorFlow's default strategy and with
  dense embedding gradients; ``one_worker_indexed_slices`` is the run
  without); writes ``tutorial_parameter_server.json``.

Every file lands in ``tests/data/tf_reference/`` with the settings the
port's test must give the port (sizes, ``weights_seed``; the data in order).
The training runs start from the port's seeded weights
(`distrib.testing.seeded_weights`) on the port's data: the MNIST subset of
`distrib.datasets.mnist` and the parameter-server port's ``torch.rand`` draw
are read by distrib's Python (``DISTRIB_PYTHON``, default
``.venv/bin/python`` of the repository or of ``/work/main``).
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "tf_reference" / "tutorial_distributed_input.json"
SCRIPT = str(HERE / "tutorial_input_tf.py")
sys.path.insert(0, str(HERE))

from generate import _free_ports  # noqa: E402


def _result(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if len(lines) != 1:
        raise RuntimeError(f"no result:\n{stdout[-3000:]}")
    return json.loads(lines[0][len("RESULT "):])


def _run(mode, env=None, script=SCRIPT, args=()):
    proc = subprocess.run([sys.executable, script, mode, *args], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, **(env or {})), cwd=str(HERE))
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return _result(proc.stdout)


def _workers():
    ports = _free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    procs = [subprocess.Popen([sys.executable, SCRIPT, "workers"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=dict(os.environ, TF_CONFIG=json.dumps(
                                  {"cluster": cluster, "task": {"type": "worker", "index": i}})))
             for i in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (_, err) in zip(procs, outs):
        if p.returncode:
            raise RuntimeError(err[-3000:])
    return [_result(out) for out, _ in outs]


def _distrib_python():
    if os.environ.get("DISTRIB_PYTHON"):
        return os.environ["DISTRIB_PYTHON"]
    for root in (HERE.parents[1], Path("/work/main")):
        if (root / ".venv" / "bin" / "python").exists():
            return str(root / ".venv" / "bin" / "python")
    raise SystemExit("set DISTRIB_PYTHON to a Python that can import distrib (for its MNIST subset)")


def mnist_subset(path, train, test):
    """Write ``x_train[:train]``, ``y_train[:train]``, ``x_test[:test]``, ``y_test[:test]`` of distrib's MNIST."""
    code = ("import sys, numpy as np, distrib.datasets.mnist as m; (a, b), (c, d) = m.load_data(); "
            f"np.savez(sys.argv[1], x_train=a[:{train}], y_train=b[:{train}], x_test=c[:{test}], y_test=d[:{test}])")
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1] / "src"))
    subprocess.run([_distrib_python(), "-c", code, str(path)], check=True, timeout=600, env=env)
    return str(path)


# the port's test runs these (tests/distributed/test_tutorial_custom_training_port.py reads them from the JSON)
CUSTOM_TRAINING = {"epochs": 2, "batch_size_per_replica": 32, "train_examples": 1280, "test_examples": 512,
                   "initial_weights_seed": 3}


# tests/distributed/test_tutorial_saving_ports.py gives the Keras tutorial's port these (TUTORIAL_* variables)
KERAS = {"examples_per_replica": 512, "epochs": 4, "weights_seed": 5}
SAVE_AND_LOAD = {"examples_per_replica": 512, "epochs": 2, "weights_seed": 6}


def _with_mnist(script, settings, replicas):
    """``script`` on ``replicas`` CPUs and the first ``settings["examples"]`` images of each split."""
    with tempfile.TemporaryDirectory() as tmp:
        data = mnist_subset(Path(tmp) / "mnist.npz", settings["examples"], settings["examples"])
        return _run(str(replicas), script=str(HERE / script), args=(data, json.dumps(settings)))


def _keras_fit(replicas):
    settings = dict(KERAS, examples=KERAS["examples_per_replica"] * replicas)
    return _with_mnist("tutorial_keras_fit_tf.py", settings, replicas)


def save_and_load(tf_version):
    record = {"tensorflow": tf_version, "settings": SAVE_AND_LOAD}
    for name, replicas in (("alone", 1), ("mirrored_2_devices", 2)):
        settings = dict(SAVE_AND_LOAD, examples=SAVE_AND_LOAD["examples_per_replica"] * replicas)
        record[name] = _with_mnist("tutorial_save_and_load_tf.py", settings, replicas)
    out = OUT.with_name("tutorial_save_and_load.json")
    out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}")


# tests/distributed/test_example_tutorial_parameter_server.py gives the port these (TUTORIAL_* variables)
PARAMETER_SERVER = {"fit_epochs": 2, "ctl_epochs": 4, "weights_seed": 8}


def parameter_server(tf_version):
    """The port's one-worker run on TensorFlow; the fit section's data is worker 0's ``torch.rand`` draw."""
    code = ("import json, torch; g = torch.Generator().manual_seed(0); x = torch.rand((10, 10), generator=g); "
            "y = torch.rand((10,), generator=g); print(json.dumps([x.tolist(), y.tolist()]))")
    drawn = subprocess.run([_distrib_python(), "-c", code], check=True, timeout=600, capture_output=True, text=True)
    fit_x, fit_y = json.loads(drawn.stdout)
    record = {"tensorflow": tf_version, "settings": PARAMETER_SERVER}
    for name, dense in (("one_worker", True), ("one_worker_indexed_slices", False)):
        settings = dict(PARAMETER_SERVER, fit_x=fit_x, fit_y=fit_y, dense_gradients=dense)
        record[name] = _run("1", script=str(HERE / "tutorial_parameter_server_tf.py"), args=(json.dumps(settings),))
    out = OUT.with_name("tutorial_parameter_server.json")
    out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}")


def custom_training(tf_version):
    settings = CUSTOM_TRAINING
    with tempfile.TemporaryDirectory() as tmp:
        data = mnist_subset(Path(tmp) / "mnist.npz", settings["train_examples"], settings["test_examples"])
        script, args = str(HERE / "tutorial_custom_training_tf.py"), (data, json.dumps(settings))
        result = _run("2", script=script, args=args)
        other_order = _run("2", script=script, args=args, env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    out = OUT.with_name("tutorial_custom_training.json")
    out.write_text(json.dumps({"tensorflow": tf_version, "settings": settings, "mirrored_2_devices": result,
                               "mirrored_2_devices_onednn_off": other_order}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}")


def keras(tf_version):
    record = {"tensorflow": tf_version, **_run("alone", script=str(HERE / "tutorial_keras_tf.py")),
              "settings": KERAS, "alone": _keras_fit(1), "mirrored_2_devices": _keras_fit(2)}
    keras_out = OUT.with_name("tutorial_keras_distributed.json")
    keras_out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {keras_out}")


def main():
    import tensorflow as tf

    if sys.argv[1:]:
        tutorials = {"keras": keras, "custom_training": custom_training, "save_and_load": save_and_load,
                     "parameter_server": parameter_server}
        if sys.argv[1] not in tutorials:
            raise SystemExit(f"unknown tutorial {sys.argv[1]!r}: one of {', '.join(tutorials)} (or none)")
        tutorials[sys.argv[1]](tf.__version__)
        return

    record = {"tensorflow": tf.__version__, "alone": _run("1"), "mirrored_2_devices": _run("2"),
              "multi_worker_2_workers": _workers()}
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")

if __name__ == "__main__":
    main()
