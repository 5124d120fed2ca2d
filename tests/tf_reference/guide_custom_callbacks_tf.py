"""The Keras guide "Writing your own callbacks", run by TensorFlow 2.21 (tf.keras is Keras 3).

Run by `generate_round_four.py` with the TensorFlow virtual environment:
``guide_custom_callbacks_tf.py MNIST_NPZ``. The guide's program on the first
``ROWS`` MNIST images (``x_test``: the guide's 1000), with fixed first weights
(``initial_weights``) and ``shuffle=False`` so distrib's port
(`examples/guide_custom_callbacks.py`) can be compared step by step. Prints
``RESULT {json}``: the hooks `CustomCallback` saw, `LossAndErrorPrintingCallback`'s
batch and epoch numbers, `EarlyStoppingAtMinLoss`'s epochs, and the
learning rate and loss of every epoch under `CustomLearningRateScheduler`.
"""
import json
import os
import sys

os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow import keras  # noqa: E402

ROWS, TEST_ROWS = 1280, 1000
LOG = {"hooks": [], "batches": [], "epochs": [], "evaluate": [], "early": [], "schedule": []}


def initial_weights():
    return [np.linspace(-0.05, 0.05, 784, dtype=np.float32).reshape(784, 1), np.zeros(1, np.float32)]


def get_model():
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(1)])
    model.layers[0].set_weights(initial_weights())
    model.compile(optimizer=keras.optimizers.RMSprop(learning_rate=0.1), loss="mean_squared_error",
                  metrics=["mean_absolute_error"])
    return model


class CustomCallback(keras.callbacks.Callback):
    pass


for _name in ("on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_test_begin", "on_test_end",
              "on_predict_begin", "on_predict_end", "on_train_batch_begin", "on_train_batch_end",
              "on_test_batch_begin", "on_test_batch_end", "on_predict_batch_begin", "on_predict_batch_end"):
    setattr(CustomCallback, _name, (lambda n: lambda self, *a, **k: LOG["hooks"].append(n))(_name))


class LossAndErrorPrintingCallback(keras.callbacks.Callback):
    def __init__(self, where):
        super().__init__()
        self.where = where

    def on_train_batch_end(self, batch, logs=None):
        LOG["batches"].append([batch, logs["loss"]])

    def on_test_batch_end(self, batch, logs=None):
        LOG["batches"].append([batch, logs["loss"]])

    def on_epoch_end(self, epoch, logs=None):
        LOG[self.where].append([epoch, logs["loss"], logs["mean_absolute_error"]])


class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
    def __init__(self, patience=0):
        super().__init__()
        self.patience = patience
        self.best_weights = None

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = np.inf

    def on_epoch_end(self, epoch, logs=None):
        current = logs.get("loss")
        if np.less(current, self.best):
            self.best = current
            self.wait = 0
            self.best_weights = self.model.get_weights()
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped_epoch = epoch
                self.model.stop_training = True
                self.model.set_weights(self.best_weights)

    def on_train_end(self, logs=None):
        LOG["stopped_epoch"] = self.stopped_epoch


class CustomLearningRateScheduler(keras.callbacks.Callback):
    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_epoch_begin(self, epoch, logs=None):
        lr = self.model.optimizer.learning_rate
        scheduled_lr = self.schedule(epoch, float(np.array(lr)))
        self.model.optimizer.learning_rate = scheduled_lr
        LOG["schedule"].append([epoch, float(scheduled_lr)])


LR_SCHEDULE = [(3, 0.05), (6, 0.01), (9, 0.005), (12, 0.001)]


def lr_schedule(epoch, lr):
    if epoch < LR_SCHEDULE[0][0] or epoch > LR_SCHEDULE[-1][0]:
        return lr
    for i in range(len(LR_SCHEDULE)):
        if epoch == LR_SCHEDULE[i][0]:
            return LR_SCHEDULE[i][1]
    return lr


def main():
    data = np.load(sys.argv[1])
    x_train = data["x_train"][:ROWS].reshape(-1, 784).astype("float32") / 255.0
    x_test = data["x_test"][:TEST_ROWS].reshape(-1, 784).astype("float32") / 255.0
    y_train, y_test = data["y_train"][:ROWS], data["y_test"][:TEST_ROWS]

    model = get_model()
    model.fit(x_train, y_train, batch_size=128, epochs=1, verbose=0, validation_split=0.5, shuffle=False,
              callbacks=[CustomCallback()])
    model.evaluate(x_test, y_test, batch_size=128, verbose=0, callbacks=[CustomCallback()])
    model.predict(x_test, batch_size=128, callbacks=[CustomCallback()], verbose=0)

    model = get_model()
    model.fit(x_train, y_train, batch_size=128, epochs=2, verbose=0, shuffle=False,
              callbacks=[LossAndErrorPrintingCallback("epochs")])
    LOG["evaluate"] = model.evaluate(x_test, y_test, batch_size=128, verbose=0,
                                     callbacks=[LossAndErrorPrintingCallback("epochs")])

    model = get_model()
    model.fit(x_train, y_train, batch_size=64, steps_per_epoch=5, epochs=30, verbose=0, shuffle=False,
              callbacks=[LossAndErrorPrintingCallback("early"), EarlyStoppingAtMinLoss()])
    LOG["early_final"] = model.evaluate(x_test, y_test, batch_size=128, verbose=0)

    model = get_model()
    hist = model.fit(x_train, y_train, batch_size=64, steps_per_epoch=5, epochs=15, verbose=0, shuffle=False,
                     callbacks=[CustomLearningRateScheduler(lr_schedule)])
    LOG["schedule_loss"] = hist.history["loss"]
    print("RESULT " + json.dumps(LOG))


if __name__ == "__main__":
    main()
