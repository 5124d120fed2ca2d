"""Record what TensorFlow 2.21 / Keras 3.15 computes for issue 49's scenarios, as JSON.

Run with the TensorFlow virtual environment (never distrib's):

    /work/tfvenv/bin/python tests/tf_reference/generate_round_four.py

Writes ``tests/data/tf_reference/round_four.json``:

* ``batch_rule``: arrays without ``batch_size`` (`round_four_scenarios`):
  ``fit_steps`` (``steps_per_epoch`` and ``validation_steps``: per-epoch
  ``loss``/``val_loss`` and the final weights), ``fit_split``
  (``validation_split=0.2`` with ``steps_per_epoch``), ``evaluate_steps``
  (the loss of ``evaluate(x, y, steps=STEPS)``) and ``predict_rows`` (rows
  ``predict(x, steps=STEPS)`` returns);
* ``callback_hooks``: the hook methods ``keras.callbacks.Callback`` defines,
  and the order a one-epoch ``fit`` with validation, then ``evaluate`` and
  ``predict`` call them in (each of 2 steps; each hook also runs the base
  class's, so Keras 2's ``on_batch_*`` show where Keras 3 calls them);
* ``array_passes``: `round_four_scenarios.PASS_CASES` fitted without
  shuffling: per-epoch logs, the epoch and batch hooks in order
  (``E<epoch>``, ``b<batch>``, ``t<batch>``), the final weights and how many
  "ran out of data" warnings Keras 3 gave;
* ``training_checkpoints``, ``custom_callbacks``: the two Keras guides' runs
  (``guide_training_checkpoints_tf.py``, ``guide_custom_callbacks_tf.py``);
* ``migrate_multi_worker``: TF's guide "Migrate multi-worker CPU/GPU
  training" (``migrate_multi_worker_tf.py``): its ``ParameterServerStrategy``
  part on a real in-process cluster (Keras 2, one worker) and its
  ``MultiWorkerMirroredStrategy`` part (Keras 3), with the ``settings`` the
  port's test passes on.

``generate_round_four.py SECTION ...`` recomputes only those sections and
keeps the others as stored.
"""
import json
import os
import sys
from pathlib import Path

os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "tf_reference" / "round_four.json"
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import round_four_scenarios as sc  # noqa: E402


def _tf():
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf


def _model(tf):
    kernel, bias = sc.initial_weights()
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    model.layers[0].set_weights([kernel, bias])
    model.compile(optimizer=tf.keras.optimizers.SGD(sc.LR), loss="mse")
    return model


def batch_rule(tf):
    x, y, vx, vy = sc.data()
    out = {}
    model = _model(tf)
    hist = model.fit(x, y, steps_per_epoch=sc.STEPS, epochs=sc.EPOCHS, shuffle=False, verbose=0,
                     validation_data=(vx, vy), validation_steps=sc.VAL_STEPS)
    out["fit_steps"] = {"loss": hist.history["loss"], "val_loss": hist.history["val_loss"],
                        "weights": [w.tolist() for w in model.layers[0].get_weights()]}
    model = _model(tf)
    hist = model.fit(x, y, steps_per_epoch=sc.STEPS, epochs=1, shuffle=False, verbose=0,
                     validation_split=0.2, validation_steps=sc.VAL_STEPS)
    out["fit_split"] = {"loss": hist.history["loss"], "val_loss": hist.history["val_loss"]}
    out["evaluate_steps"] = float(_model(tf).evaluate(x, y, steps=sc.STEPS, verbose=0))
    out["predict_rows"] = int(_model(tf).predict(x, steps=sc.STEPS, verbose=0).shape[0])
    return out


def callback_hooks(tf):
    import inspect

    base = tf.keras.callbacks.Callback
    names = sorted(n for n, _ in inspect.getmembers(base, inspect.isfunction) if n.startswith("on_"))
    calls = []

    class Recorder(base):
        pass

    def recording(name):
        def hook(self, *args, **kwargs):
            calls.append(name)
            return getattr(base, name)(self, *args, **kwargs)  # the base's own forwarding (on_batch_*) shows
        return hook

    for name in names:
        setattr(Recorder, name, recording(name))
    x, y, vx, vy = sc.data()
    model = _model(tf)
    model.fit(x[:8], y[:8], batch_size=4, epochs=1, shuffle=False, verbose=0, validation_data=(vx[:8], vy[:8]),
              validation_batch_size=4, callbacks=[Recorder()])
    fit_calls = list(calls)
    calls.clear()
    model.evaluate(x[:8], y[:8], batch_size=4, verbose=0, callbacks=[Recorder()])
    eval_calls = list(calls)
    calls.clear()
    model.predict(x[:8], batch_size=4, verbose=0, callbacks=[Recorder()])
    return {"names": names, "fit": fit_calls, "evaluate": eval_calls, "predict": list(calls)}


def _recorder(base, events):
    class Recorder(base):
        def on_epoch_begin(self, epoch, logs=None):
            events.append(f"E{epoch}")

        def on_train_batch_begin(self, batch, logs=None):
            events.append(f"b{batch}")

        def on_test_batch_begin(self, batch, logs=None):
            events.append(f"t{batch}")
    return Recorder()


def array_passes(tf):
    import warnings

    x, y, vx, vy = sc.data()
    out = {}
    for name, case in sc.PASS_CASES.items():
        kwargs = dict(case["fit"])
        if "val" in case:
            kwargs["validation_data"] = (vx[:case["val"]], vy[:case["val"]])
        model = _model(tf)
        if "steps_per_execution" in case:
            model.compile(optimizer=tf.keras.optimizers.SGD(sc.LR), loss="mse",
                          steps_per_execution=case["steps_per_execution"])
        events = []
        data = (x[:case["rows"]], y[:case["rows"]])
        if "dataset_batch" in case:
            data = (tf.data.Dataset.from_tensor_slices(data).batch(case["dataset_batch"]), None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hist = model.fit(*data, shuffle=False, verbose=0,
                             callbacks=[_recorder(tf.keras.callbacks.Callback, events)], **kwargs)
        out[name] = {"history": {k: [float(v) for v in vs] for k, vs in hist.history.items()},
                     "events": events, "weights": [w.tolist() for w in model.layers[0].get_weights()],
                     "ran_out_warnings": sum("ran out of data" in str(w.message) for w in caught)}
    return out


def training_checkpoints():
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, str(HERE / "guide_training_checkpoints_tf.py")], capture_output=True,
                              text=True, timeout=900, cwd=tmp, check=True)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def custom_callbacks():
    import subprocess
    import tempfile

    from generate_tutorials import mnist_subset

    with tempfile.TemporaryDirectory() as tmp:
        data = mnist_subset(Path(tmp) / "mnist.npz", 1280, 1000)
        proc = subprocess.run([sys.executable, str(HERE / "guide_custom_callbacks_tf.py"), data],
                              capture_output=True, text=True, timeout=900, cwd=tmp, check=True)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


MIGRATE_SETTINGS = {"workers": 1, "buffer_size": 1, "weights_seed": 49}


def migrate_multi_worker():
    import subprocess

    out = {"settings": MIGRATE_SETTINGS}
    for part, legacy in (("ps", "1"), ("mwms", "0")):
        env = dict(os.environ, TF_USE_LEGACY_KERAS=legacy)
        env.pop("TF_CONFIG", None)
        proc = subprocess.run([sys.executable, str(HERE / "migrate_multi_worker_tf.py"), part,
                               json.dumps(MIGRATE_SETTINGS)], capture_output=True, text=True, timeout=900,
                              env=env, check=True)
        line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
        out[part] = json.loads(line[len("RESULT "):])
    return out


SECTIONS = {"batch_rule": lambda tf: batch_rule(tf), "callback_hooks": lambda tf: callback_hooks(tf),
            "array_passes": lambda tf: array_passes(tf),
            "training_checkpoints": lambda tf: training_checkpoints(),
            "custom_callbacks": lambda tf: custom_callbacks(),
            "migrate_multi_worker": lambda tf: migrate_multi_worker()}


def main(sections):
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"generate_round_four.py: unknown sections {unknown}; known: {sorted(SECTIONS)}")
    tf = _tf()
    record = json.loads(OUT.read_text()) if sections and OUT.exists() else {}
    record["tensorflow"] = tf.__version__
    for name in sections or SECTIONS:
        record[name] = SECTIONS[name](tf)
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    np.set_printoptions(precision=6)
    main(sys.argv[1:])
