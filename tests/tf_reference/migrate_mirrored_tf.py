"""TF guide "Migrate single-worker multiple-GPU training" (TF2 section) on TensorFlow, for the port's comparison.

Run by ``generate_round_three.py`` with the TensorFlow virtual environment:
the guide's program from the port's seeded weights (``settings["weights_seed"]``).
Prints ``RESULT {"devices", "history", "evaluation"}``::

    python migrate_mirrored_tf.py MODE SETTINGS_JSON
"""
import json
import sys

import tensorflow as tf

from tutorial_common_tf import emit, set_seeded_weights, strategy as make_strategy


def main(mode, settings):
    features = [[1., 1.5], [2., 2.5], [3., 3.5]]
    labels = [[0.3], [0.5], [0.7]]
    eval_features = [[4., 4.5], [5., 5.5], [6., 6.5]]
    eval_labels = [[0.8], [0.9], [1.]]

    strategy = make_strategy(mode)

    dataset = tf.data.Dataset.from_tensor_slices(
        (features, labels)).batch(1)
    eval_dataset = tf.data.Dataset.from_tensor_slices(
        (eval_features, eval_labels)).batch(1)

    with strategy.scope():
        model = tf.keras.models.Sequential([tf.keras.layers.Input((2,)), tf.keras.layers.Dense(1)])
        set_seeded_weights(model, settings["weights_seed"], ["dense", "same"])
        optimizer = tf.keras.optimizers.Adagrad(learning_rate=0.05)
        model.compile(optimizer, "mse")

    history = model.fit(dataset, verbose=0)
    evaluation = model.evaluate(eval_dataset, return_dict=True, verbose=0)
    emit({"devices": strategy.num_replicas_in_sync, "history": history.history,
          "evaluation": {k: float(v) for k, v in evaluation.items()}})


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
