"""TF's "Save and load a model using a distribution strategy" tutorial on TensorFlow, with its numbers.

Run by ``generate_tutorials.py save_and_load`` with the TensorFlow virtual
environment. The tutorial's program with what the comparison with
``examples/tutorial_save_and_load.py`` needs: the port's MNIST subset
(``DATA``), no shuffle (``TUTORIAL_BUFFER_SIZE=1``), the port's seeded
initial weights (``TUTORIAL_WEIGHTS_SEED``) for every model it builds.
Prints ``RESULT {...}`` with the history of every ``fit`` (the model under
the strategy, the restored model outside any scope, the restored model under
``OneDeviceStrategy``, the subclassed model) and the accuracy of the
exported fresh model's serving function over the evaluation set::

    python tutorial_save_and_load_tf.py MODE DATA.npz SETTINGS_JSON
"""
import json
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

from tutorial_common_tf import emit, set_seeded_weights, strategy as make_strategy
from tutorial_keras_fit_tf import build_model, datasets


def history(h):
    return {k: [float(v) for v in vs] for k, vs in h.history.items()}


def main(mode, data, settings):
    mirrored_strategy = make_strategy(mode)
    seed, EPOCHS, OUT = settings["weights_seed"], settings["epochs"], tempfile.mkdtemp()
    train_dataset, eval_dataset = datasets(mirrored_strategy, data, settings["examples"], 1)

    def get_model():
        with mirrored_strategy.scope():
            model = build_model(seed)
            model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          optimizer=tf.keras.optimizers.Adam(),
                          metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
            return model

    out = {"devices": mirrored_strategy.num_replicas_in_sync}
    model = get_model()
    out["fit"] = history(model.fit(train_dataset, epochs=EPOCHS, verbose=0))

    keras_model_path = os.path.join(OUT, 'keras_save.keras')
    model.save(keras_model_path)
    restored_keras_model = tf.keras.models.load_model(keras_model_path)
    out["restored fit"] = history(restored_keras_model.fit(train_dataset, epochs=EPOCHS, verbose=0))

    another_strategy = tf.distribute.OneDeviceStrategy('/cpu:0')
    with another_strategy.scope():
        restored_keras_model_ds = tf.keras.models.load_model(keras_model_path)
        out["one device fit"] = history(restored_keras_model_ds.fit(train_dataset, epochs=EPOCHS, verbose=0))

    model = get_model()
    saved_model_path = os.path.join(OUT, 'tf_save')
    model.export(saved_model_path)
    inference_func = tf.saved_model.load(saved_model_path).signatures['serving_default']
    correct = total = 0
    for images, labels in eval_dataset:
        outputs = list(inference_func(images).values())[0]
        correct += int(np.sum(np.argmax(outputs.numpy(), axis=1) == labels.numpy()))
        total += len(labels)
    out["exported accuracy"] = correct / total

    class SubclassedModel(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self._dense_layer = tf.keras.layers.Dense(5, dtype=tf.dtypes.float32)

        def call(self, inputs):
            return self._dense_layer(inputs)

    my_model = SubclassedModel()
    my_model(tf.zeros((1, 5)))
    set_seeded_weights(my_model, seed, ["dense", "same"])
    BATCH_SIZE = 4 * mirrored_strategy.num_replicas_in_sync
    dataset = tf.data.Dataset.from_tensors(
        (tf.range(5, dtype=tf.float32), tf.range(5, dtype=tf.float32))).repeat(100).batch(BATCH_SIZE)
    my_model.compile(optimizer='adam', loss='mean_squared_error')
    out["subclassed fit"] = history(my_model.fit(dataset, epochs=2, verbose=0))
    emit(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
