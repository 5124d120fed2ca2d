"""TF's "Parameter server training" tutorial's computations on TensorFlow, for a number-by-number comparison.

Run by ``generate_tutorials.py parameter_server`` with the TensorFlow virtual
environment. What ``examples/tutorial_parameter_server.py`` prints with ONE
worker (the only case with a defined order: with more, which worker takes
which step depends on timing), computed on TensorFlow:

* TF 2.21's Keras 3 has no ``Model.fit`` under ``ParameterServerStrategy``
  (nor ``DatasetCreator``), and with one worker the steps run one after
  another, so both sections run on TensorFlow's default strategy: the same
  steps in the same order on the same data.
* The port's data: the fit section's ``torch.rand`` features and targets of
  worker 0 (``SETTINGS["fit_x"]``, ``["fit_y"]``, drawn by the generator with
  distrib's Python), the custom loop's examples from Python's ``random``
  seeded 0 as in the port; datasets in order (``TUTORIAL_BUFFER_SIZE=1``).
* The embedding's gradient made dense (``SETTINGS["dense_gradients"]``), as
  PyTorch's is: TensorFlow's is an ``IndexedSlices`` with one row per lookup,
  and Keras 3's RMSprop squares those rows before duplicates are summed
  (``v += (1 - rho) * sum(g_i ** 2)`` rather than ``(sum g_i) ** 2``), which
  is not RMSprop's rule; the generator records that run too.
* The port's seeded initial weights (``TUTORIAL_WEIGHTS_SEED``) and the
  port's learning rate (Keras's RMSprop at 0.001, not the tutorial's 0.1;
  see the port's comment).

Prints ``RESULT {...}``: the fit losses per epoch, the accuracy after each
custom-loop epoch, the final loss and both evaluation accuracies::

    python tutorial_parameter_server_tf.py 1 SETTINGS_JSON
"""
import json
import random
import sys

import numpy as np
import tensorflow as tf

from tutorial_common_tf import emit, set_seeded_weights, strategy as make_strategy


def fit_section(settings):
    x, y = np.array(settings["fit_x"], np.float32), np.array(settings["fit_y"], np.float32)
    y = y[:, None]   # what tf.keras 2's fit did with (64,) targets (Keras 3.15 fails on them)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1).repeat().batch(64)
    model = tf.keras.Sequential([tf.keras.layers.Input((10,)), tf.keras.layers.Dense(10)])
    set_seeded_weights(model, settings["weights_seed"], ["dense", "same"])
    model.compile(tf.keras.optimizers.SGD(), loss="mse", steps_per_execution=10)
    history = model.fit(dataset, epochs=settings["fit_epochs"], steps_per_epoch=20, verbose=0)
    return [float(v) for v in history.history["loss"]]


class Model(tf.keras.Model):
    def __init__(self, vocabulary):
        super().__init__()
        self.emb_layer = tf.keras.layers.Embedding(vocabulary, 16384)
        self.dense = tf.keras.layers.Dense(1, activation="sigmoid",
                                           kernel_regularizer=tf.keras.regularizers.L2(1e-4))

    def call(self, inputs):
        return self.dense(tf.reduce_mean(self.emb_layer(inputs["features"]), axis=1))


def custom_loop_section(settings, out):
    feature_vocab = ["avenger", "ironman", "batman", "hulk", "spiderman", "kingkong", "wonder_woman"]
    label_vocab = ["yes", "no"]
    feature_ids = {word: i + 1 for i, word in enumerate(feature_vocab)}
    label_ids = {word: i for i, word in enumerate(label_vocab)}
    random.seed(0)
    features, labels = [], []
    for _ in range(200):
        sample = random.sample(feature_vocab, 3)
        features.append([feature_ids[w] for w in sample])
        labels.append([label_ids["yes" if "avenger" in sample else "no"]])
    raw = tf.data.Dataset.from_tensor_slices({"features": np.array(features, np.int64),
                                              "label": np.array(labels, np.int64)})
    examples = raw.map(lambda x: ({"features": x["features"]}, x["label"]))

    model = Model(len(feature_vocab) + 1)
    model({"features": tf.zeros((1, 3), tf.int64)})
    set_seeded_weights(model, settings["weights_seed"], ["same", "dense", "same"])
    optimizer = tf.keras.optimizers.RMSprop(learning_rate=0.001)
    accuracy = tf.keras.metrics.Accuracy()
    iterator = iter(examples.shuffle(1).batch(32).repeat())

    def step_fn():
        batch_data, labels = next(iterator)
        with tf.GradientTape() as tape:
            pred = model(batch_data, training=True)
            per_example_loss = tf.keras.losses.BinaryCrossentropy(reduction=None)(labels, pred)
            loss = tf.nn.compute_average_loss(per_example_loss)
            loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        gradients = tape.gradient(loss, model.trainable_variables)
        if settings["dense_gradients"]:
            gradients = [tf.convert_to_tensor(g) for g in gradients]
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        accuracy.update_state(labels, tf.cast(tf.greater(pred, 0.5), tf.int64))
        return loss

    out["epoch accuracies"] = []
    for _ in range(settings["ctl_epochs"]):
        accuracy.reset_state()
        for _ in range(5):
            step_fn()
        out["epoch accuracies"].append(float(accuracy.result().numpy()))
    out["final loss"] = float(step_fn().numpy())

    def evaluate(dataset, steps):
        eval_accuracy = tf.keras.metrics.Accuracy()
        for batch_data, labels in dataset.take(steps):
            eval_accuracy.update_state(labels, tf.cast(tf.greater(model(batch_data), 0.5), tf.int64))
        return float(eval_accuracy.result().numpy())

    out["evaluation accuracies"] = [evaluate(examples.batch(8), 25),
                                    evaluate(examples.shuffle(1).repeat().batch(8), 2)]


def main(settings):
    make_strategy("1")
    out = {"fit losses": fit_section(settings)}
    custom_loop_section(settings, out)
    emit(out)


if __name__ == "__main__":
    main(json.loads(sys.argv[2]))
