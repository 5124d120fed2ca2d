"""TF's guide "Migrate multi-worker CPU/GPU training" (its TensorFlow 2 part) on TensorFlow 2.21, for the port's test.

Run by ``generate_round_four.py`` with the TensorFlow virtual environment,
once per part (each in its own process: the first needs Keras 2)::

    python migrate_multi_worker_tf.py ps SETTINGS_JSON     # TF_USE_LEGACY_KERAS=1
    python migrate_multi_worker_tf.py mwms SETTINGS_JSON

* ``ps``: the guide's cells as written: ``TF_CONFIG`` with free ports, a
  ``tf.distribute.Server`` per worker and ps in this process, a
  ``ParameterServerStrategy``, ``Model.fit`` on a plain dataset and
  ``Model.evaluate(steps=10)``, ``tf.keras.optimizers.legacy.Adagrad``. That
  needs Keras 2 (``tf_keras``; TF 2.21's Keras 3 has neither the legacy
  optimizers nor ``fit`` under this strategy), so the caller sets
  ``TF_USE_LEGACY_KERAS=1``. One worker (``SETTINGS["workers"]``): with more,
  which worker runs which step (and so which batch) depends on timing.
* ``mwms``: the guide's alternative, ``MultiWorkerMirroredStrategy`` without
  ``TF_CONFIG`` (it trains locally), with Keras 3's ``Adagrad`` (what a TF 2.21
  user gets from ``tf.keras``).

Both start from the port's seeded weights (``SETTINGS["weights_seed"]``) and
keep the data in order (shuffle buffer ``SETTINGS["buffer_size"]`` = 1).
Prints ``RESULT {"losses": [...], "evaluate": {...}}``.
"""
import json
import os
import socket
import sys

import tensorflow as tf

from tutorial_common_tf import emit, set_seeded_weights

features = [[1., 1.5], [2., 2.5], [3., 3.5]]
labels = [[0.3], [0.5], [0.7]]
eval_features = [[4., 4.5], [5., 5.5], [6., 6.5]]
eval_labels = [[0.8], [0.9], [1.]]


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def ps_strategy(num_workers):
    chief_port, *rest = _free_ports(1 + num_workers + 2)
    worker_ports, ps_ports = rest[:num_workers], rest[num_workers:]
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"chief": ["localhost:%s" % chief_port],
                    "worker": ["localhost:%s" % port for port in worker_ports],
                    "ps": ["localhost:%s" % port for port in ps_ports]},
        "task": {"type": "chief", "index": 0}})
    cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    worker_config = tf.compat.v1.ConfigProto()
    worker_config.inter_op_parallelism_threads = 4
    for i in range(num_workers):
        tf.distribute.Server(cluster_resolver.cluster_spec(), job_name="worker", task_index=i, config=worker_config)
    for i in range(2):
        tf.distribute.Server(cluster_resolver.cluster_spec(), job_name="ps", task_index=i)
    return tf.distribute.experimental.ParameterServerStrategy(cluster_resolver)


def train_and_evaluate(strategy, optimizer_class, settings):
    dataset = tf.data.Dataset.from_tensor_slices(
        (features, labels)).shuffle(settings["buffer_size"]).repeat().batch(64)
    eval_dataset = tf.data.Dataset.from_tensor_slices(
        (eval_features, eval_labels)).repeat().batch(1)
    with strategy.scope():
        model = tf.keras.models.Sequential([tf.keras.layers.Dense(1)])
        model.build((None, 2))
        set_seeded_weights(model, settings["weights_seed"], ["dense", "same"])
        model.compile(optimizer_class(learning_rate=0.05), "mse")
    history = model.fit(dataset, epochs=5, steps_per_epoch=10, verbose=0)
    result = model.evaluate(eval_dataset, steps=10, return_dict=True, verbose=0)
    return {"losses": [float(v) for v in history.history["loss"]],
            "evaluate": {k: float(v) for k, v in result.items()},
            "weights": [w.tolist() for w in model.get_weights()]}


def main(part, settings):
    if part == "ps":
        assert tf.keras.__name__.startswith("tf_keras"), "run with TF_USE_LEGACY_KERAS=1"
        emit(train_and_evaluate(ps_strategy(settings["workers"]), tf.keras.optimizers.legacy.Adagrad, settings))
    else:
        os.environ.pop("TF_CONFIG", None)
        tf.config.threading.set_intra_op_parallelism_threads(1)
        emit(train_and_evaluate(tf.distribute.MultiWorkerMirroredStrategy(), tf.keras.optimizers.Adagrad, settings))


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
