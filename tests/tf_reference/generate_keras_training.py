"""Record what TensorFlow 2.21 / Keras 3.15 computes for `keras_training_scenarios.py`, as JSON.

Run with the TensorFlow virtual environment (never distrib's), on the CPU with one thread:

    bench/.tf-venv/bin/python tests/tf_reference/generate_keras_training.py

It writes ``tests/data/tf_reference/keras_training.json``:

* ``optimizers``: per case, the variables after every step (a learning-rate
  change after step ``LR_CHANGE_AT``) and, with ``use_ema``, after
  ``finalize_variable_values``; ``scheduled_optimizer`` likewise;
* ``schedules``: each schedule's value at ``SCHEDULE_STEPS``;
* ``loss_scale``: ``LossScaleOptimizer``'s ``dynamic_scale``, ``iterations``
  and the variable after every step of ``LOSS_SCALE_PATTERN``;
* ``policies``: each dtype policy's compute and variable dtype;
* ``callbacks``: per replayed epoch, ``stop_training``, the learning rate,
  whether ModelCheckpoint saved and whether a warning was raised; the final
  weights' first entry after ``on_train_end``;
* ``tiny_fit``: a real ``fit`` (SGD with momentum, ReduceLROnPlateau,
  EarlyStopping with restore_best_weights): per-epoch loss and learning
  rate, and the final weights.
"""
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "tf_reference" / "keras_training.json"
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import keras_training_scenarios as sc  # noqa: E402


def _tf():
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf


def _trajectory(tf, opt, change_lr):
    variables = [tf.Variable(w) for w in sc.initial_weights()]
    steps = []
    for index, grads in enumerate(sc.gradients()):
        opt.apply_gradients(zip([tf.constant(g) for g in grads], variables))
        steps.append([v.numpy().tolist() for v in variables])
        if change_lr and index + 1 == sc.LR_CHANGE_AT:
            opt.learning_rate = float(opt.learning_rate.numpy()) * sc.LR_CHANGE_FACTOR
    out = {"steps": steps, "iterations": int(opt.iterations.numpy())}
    if getattr(opt, "use_ema", False):
        opt.finalize_variable_values(variables)
        out["finalized"] = [v.numpy().tolist() for v in variables]
    return out


def optimizers(tf):
    out = {}
    for case_id, name, kwargs in sc.OPTIMIZER_CASES:
        out[case_id] = _trajectory(tf, getattr(tf.keras.optimizers, name)(**kwargs), change_lr=True)
    name, kwargs, schedule, schedule_kwargs = sc.SCHEDULED_OPTIMIZER
    lr = getattr(tf.keras.optimizers.schedules, schedule)(**schedule_kwargs)
    scheduled = _trajectory(tf, getattr(tf.keras.optimizers, name)(learning_rate=lr, **kwargs), change_lr=False)
    return out, scheduled


def schedules(tf):
    out = {}
    for case_id, name, kwargs in sc.SCHEDULE_CASES:
        schedule = getattr(tf.keras.optimizers.schedules, name)(**kwargs)
        out[case_id] = [float(schedule(step).numpy()) for step in sc.SCHEDULE_STEPS]
    return out


def loss_scale(tf):
    inner = tf.keras.optimizers.SGD(learning_rate=0.1)
    opt = tf.keras.mixed_precision.LossScaleOptimizer(inner, initial_scale=sc.LOSS_SCALE_INITIAL,
                                                      dynamic_growth_steps=sc.LOSS_SCALE_GROWTH_STEPS)
    var = tf.Variable(sc.initial_weights()[0])
    out = {"scale": [], "iterations": [], "weights": [], "scaled_loss": []}
    for g in sc.loss_scale_grads():
        opt.apply_gradients([(tf.constant(g), var)])
        out["scale"].append(float(opt.dynamic_scale.numpy()))
        out["iterations"].append(int(opt.iterations.numpy()))
        out["weights"].append(var.numpy().tolist())
        out["scaled_loss"].append(float(opt.scale_loss(tf.constant(1.5)).numpy()))
    return out


def policies(tf):
    out = {}
    for name in ("float32", "float16", "bfloat16", "float64", "mixed_float16", "mixed_bfloat16"):
        policy = tf.keras.mixed_precision.Policy(name)
        out[name] = {"compute_dtype": policy.compute_dtype, "variable_dtype": policy.variable_dtype}
    return out


def _model(tf):
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(3)])
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=sc.CALLBACK_LR), loss="mse")
    return model


def callbacks(tf):
    out = {}
    for case_id, name, kwargs, logged in sc.CALLBACK_CASES:
        model = _model(tf)
        with tempfile.TemporaryDirectory() as tmp:
            kw = dict(kwargs)
            if name == "ModelCheckpoint":
                kw["filepath"] = os.path.join(tmp, "ckpt_{epoch}.weights.h5")
                kw["save_weights_only"] = True
            cb = getattr(tf.keras.callbacks, name)(**kw)
            cb.set_model(model)
            model.stop_training = False
            cb.on_train_begin()
            epochs = []
            keys = list(logged)
            for epoch in range(len(logged[keys[0]])):
                model.set_weights(sc.epoch_weights(epoch))
                logs = {k: float(v[epoch]) for k, v in logged.items()}
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    cb.on_epoch_end(epoch, logs)
                saved = name == "ModelCheckpoint" and os.path.exists(os.path.join(tmp, f"ckpt_{epoch + 1}.weights.h5"))
                epochs.append({"stop": bool(model.stop_training), "saved": saved, "warned": any("available" in str(w.message) for w in caught),
                               "learning_rate": float(model.optimizer.learning_rate.numpy())})
                if model.stop_training:
                    break
            cb.on_train_end()
            out[case_id] = {"epochs": epochs, "final_weight": float(model.get_weights()[0][0, 0])}
    return out


def tiny_fit(tf):
    x, y, kernel, bias = sc.fit_data()
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(3)])
    model.set_weights([kernel, bias])
    model.compile(optimizer=tf.keras.optimizers.SGD(**sc.FIT_OPTIMIZER), loss="mse")
    history = model.fit(x, y, batch_size=sc.FIT_BATCH, epochs=sc.FIT_EPOCHS, shuffle=False, verbose=0,
                        callbacks=[tf.keras.callbacks.ReduceLROnPlateau(**sc.FIT_REDUCE_LR),
                                   tf.keras.callbacks.EarlyStopping(**sc.FIT_EARLY_STOP)])
    return {"loss": [float(v) for v in history.history["loss"]],
            "learning_rate": [float(v) for v in history.history["learning_rate"]],
            "weights": [w.tolist() for w in model.get_weights()]}


def main():
    tf = _tf()
    opt, scheduled = optimizers(tf)
    result = {"tensorflow": tf.__version__, "keras": tf.keras.__version__ if hasattr(tf.keras, "__version__")
              else None, "optimizers": opt, "scheduled_optimizer": scheduled, "schedules": schedules(tf),
              "loss_scale": loss_scale(tf), "policies": policies(tf), "callbacks": callbacks(tf),
              "tiny_fit": tiny_fit(tf)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=None, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
