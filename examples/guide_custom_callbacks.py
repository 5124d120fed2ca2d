"""The Keras guide "Writing your own callbacks", ported: every hook, batch and epoch logs, early stopping
with the best weights restored, a learning-rate schedule set from a callback.

The guide's `Dense(1)` on flattened MNIST is `torch.nn.Linear(784, 1)` in a
`distrib.Model`, compiled as the guide compiles it (RMSprop 0.1, mean squared
error, mean absolute error); the callbacks are the guide's, subclassing
`distrib.callbacks.Callback` and using ``self.model.get_weights()``,
``set_weights``, ``stop_training`` and ``optimizer.learning_rate`` as Keras does.

Run: ``python examples/guide_custom_callbacks.py`` (offline MNIST, see
docs/examples.md). To compare with TensorFlow
(``tests/unit/test_guide_custom_callbacks.py``) it uses the first ``ROWS``
training images, fixed first weights and ``shuffle=False``, as
``tests/tf_reference/guide_custom_callbacks_tf.py`` does; the last line is
``RESULT {json}``.
"""
import json

import numpy as np
import torch

import distrib

ROWS, TEST_ROWS = 1280, 1000
LOG = {"hooks": [], "batches": [], "epochs": [], "evaluate": [], "early": [], "schedule": []}


def initial_weights():
    return [np.linspace(-0.05, 0.05, 784, dtype=np.float32).reshape(784, 1), np.zeros(1, np.float32)]


def get_model():
    kernel, bias = initial_weights()
    net = torch.nn.Linear(784, 1)
    with torch.no_grad():
        net.weight.copy_(torch.from_numpy(kernel.T.copy()))
        net.bias.copy_(torch.from_numpy(bias))
    model = distrib.Model(net)
    model.compile(optimizer=distrib.optimizers.RMSprop(learning_rate=0.1), loss="mean_squared_error",
                  metrics=["mean_absolute_error"])
    return model


class CustomCallback(distrib.callbacks.Callback):
    pass


for _name in ("on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_test_begin", "on_test_end",
              "on_predict_begin", "on_predict_end", "on_train_batch_begin", "on_train_batch_end",
              "on_test_batch_begin", "on_test_batch_end", "on_predict_batch_begin", "on_predict_batch_end"):
    setattr(CustomCallback, _name, (lambda n: lambda self, *a, **k: LOG["hooks"].append(n))(_name))


class LossAndErrorPrintingCallback(distrib.callbacks.Callback):
    def __init__(self, where):
        super().__init__()
        self.where = where

    def on_train_batch_end(self, batch, logs=None):
        LOG["batches"].append([batch, logs["loss"]])

    def on_test_batch_end(self, batch, logs=None):
        LOG["batches"].append([batch, logs["loss"]])

    def on_epoch_end(self, epoch, logs=None):
        LOG[self.where].append([epoch, logs["loss"], logs["mean_absolute_error"]])


class EarlyStoppingAtMinLoss(distrib.callbacks.Callback):
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


class CustomLearningRateScheduler(distrib.callbacks.Callback):
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
    (x_train, y_train), (x_test, y_test) = distrib.datasets.mnist.load_data()
    x_train = x_train[:ROWS].reshape(-1, 784).astype("float32") / 255.0
    x_test = x_test[:TEST_ROWS].reshape(-1, 784).astype("float32") / 255.0
    y_train, y_test = y_train[:ROWS], y_test[:TEST_ROWS]

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
    print("RESULT " + json.dumps(LOG, default=float))


if __name__ == "__main__":
    main()
