"""The TF tutorials' Keras multi-worker job on TensorFlow (legacy tf.keras), for `bench/run.py --tf`.

Same job and report format as `workloads.py`: the tutorial CNN (no L2 terms,
like the other systems), RMSprop(0.001), 3 epochs × 70 steps, per-worker batch
64, one intra-/inter-op thread, the same synthetic data.

Usage: bench/.tf-venv/bin/python bench/tf_workload.py tf_mwms_keras_legacy OUT.json  (TF_CONFIG set)
"""
import json
import os
import resource
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["CUDA_VISIBLE_DEVICES"] = "-1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import EPOCHS, NUM_EXAMPLES, PER_WORKER_BATCH, STEPS, synthetic_mnist  # noqa: E402


def main(system, out):
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    n = strategy.num_replicas_in_sync
    global_batch = PER_WORKER_BATCH * n
    x, y = synthetic_mnist(np)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(NUM_EXAMPLES).repeat().batch(global_batch)
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.InputLayer(input_shape=(28, 28)),
            tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10)])
        model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      optimizer=tf.keras.optimizers.RMSprop(learning_rate=0.001), metrics=["accuracy"])
    times = []

    class StepClock(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            times.append(time.time())

    history = model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0, callbacks=[StepClock()])
    losses = history.history["loss"]
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    with open(out, "w") as f:
        json.dump({"system": system, "rank": task.get("index", 0), "step_times": times,
                   "returned": time.time(), "examples_per_step": global_batch,
                   "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                   "first_loss": losses[0], "last_loss": losses[-1], "losses": losses}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
