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
    if epoch < 3:
        return 1e-3
    elif epoch >= 3 and epoch < 7:
        return 1e-4
    else:
        return 1e-5


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
