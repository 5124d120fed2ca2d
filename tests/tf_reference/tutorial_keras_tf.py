"""The "Distributed training with Keras" tutorial's learning-rate cells on TensorFlow (run by generate_tutorials.py).

The tutorial's ``decay`` schedule and ``PrintLR`` callback on a small model
under ``MirroredStrategy`` for 4 epochs (the test's length); prints
``RESULT {"learning rates": [[epoch, float(lr)], ...]}``. The numbers do not
depend on the data.
"""
import json

import numpy as np
import tensorflow as tf


def decay(epoch):
    """The tutorial's schedule: 1e-3 for epochs 0-2, 1e-4 for 3-6, then 1e-5."""
    return 1e-3 if epoch < 3 else 1e-4 if epoch < 7 else 1e-5


def main():
    tf.config.threading.set_intra_op_parallelism_threads(1)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Input((4,)), tf.keras.layers.Dense(10)])
        model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      optimizer=tf.keras.optimizers.Adam(), metrics=["accuracy"])
    printed = []

    class PrintLR(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            printed.append([epoch + 1, float(model.optimizer.learning_rate.numpy())])

    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = np.arange(64) % 10
    model.fit(x, y, epochs=4, verbose=0, callbacks=[tf.keras.callbacks.LearningRateScheduler(decay), PrintLR()])
    print("RESULT " + json.dumps({"learning rates": printed}), flush=True)


if __name__ == "__main__":
    main()
