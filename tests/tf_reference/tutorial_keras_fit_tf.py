"""TF's "Distributed training with Keras" tutorial on TensorFlow, for a number-by-number comparison.

Run by ``generate_tutorials.py keras`` with the TensorFlow virtual
environment. The tutorial's program with what the comparison with
``examples/tutorial_keras_distributed.py`` needs: the MNIST subset the port's
test uses (``DATA``), no shuffle (the port's ``TUTORIAL_BUFFER_SIZE=1``), the
port's seeded initial weights (``TUTORIAL_WEIGHTS_SEED``). Keras 3 wants
weights-only checkpoints named ``*.weights.h5``. Prints ``RESULT {...}``:
the history per epoch, the learning rates ``PrintLR`` prints and the three
evaluations (latest checkpoint; reloaded without, then with, the strategy)::

    python tutorial_keras_fit_tf.py MODE DATA.npz SETTINGS_JSON
"""
import json
import os
import sys
import tempfile

import tensorflow as tf

from tutorial_common_tf import emit, mnist, set_seeded_weights, strategy as make_strategy

# the port's Conv2d(1, 32, 3) -> MaxPool2d -> Flatten of (32, 13, 13) -> Linear(5408, 64) -> Linear(64, 10)
LAYOUTS = ["conv", "same", ("dense_after", (32, 13, 13)), "same", "dense", "same"]


def build_model(seed):
    model = tf.keras.Sequential([
        tf.keras.layers.Input((28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation='relu'),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation='relu'),
        tf.keras.layers.Dense(10)])
    set_seeded_weights(model, seed, LAYOUTS)
    return model


def datasets(strategy, data, examples, buffer_size):
    (x_train, y_train), (x_test, y_test) = mnist(data)
    mnist_train = tf.data.Dataset.from_tensor_slices((x_train[:examples, ..., None], y_train[:examples]))
    mnist_test = tf.data.Dataset.from_tensor_slices((x_test[:examples, ..., None], y_test[:examples]))
    BATCH_SIZE = 64 * strategy.num_replicas_in_sync

    def scale(image, label):
        image = tf.cast(image, tf.float32)
        image /= 255
        return image, label

    train_dataset = mnist_train.map(scale).cache().shuffle(buffer_size).batch(BATCH_SIZE)
    eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE)
    return train_dataset, eval_dataset


def compile_model(model):
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.Adam(), metrics=['accuracy'])


def decay(epoch):
    return 1e-3 if epoch < 3 else 1e-4 if epoch < 7 else 1e-5


def main(mode, data, settings):
    strategy = make_strategy(mode)
    train_dataset, eval_dataset = datasets(strategy, data, settings["examples"], 1)
    with strategy.scope():
        model = build_model(settings["weights_seed"])
        compile_model(model)

    printed = []

    class PrintLR(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            printed.append([epoch + 1, float(model.optimizer.learning_rate.numpy())])

    checkpoint_dir = tempfile.mkdtemp()
    callbacks = [tf.keras.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, "ckpt_{epoch}.weights.h5"),
                                                    save_weights_only=True),
                 tf.keras.callbacks.LearningRateScheduler(decay), PrintLR()]
    history = model.fit(train_dataset, epochs=settings["epochs"], callbacks=callbacks, verbose=0)
    model.load_weights(os.path.join(checkpoint_dir, f"ckpt_{settings['epochs']}.weights.h5"))
    evals = [model.evaluate(eval_dataset, verbose=0)]

    path = os.path.join(checkpoint_dir, 'my_model.keras')
    model.save(path)
    unreplicated_model = tf.keras.models.load_model(path)
    compile_model(unreplicated_model)
    evals.append(unreplicated_model.evaluate(eval_dataset, verbose=0))
    with strategy.scope():
        replicated_model = tf.keras.models.load_model(path)
        compile_model(replicated_model)
        evals.append(replicated_model.evaluate(eval_dataset, verbose=0))

    emit({"devices": strategy.num_replicas_in_sync,
          "history": {k: [float(v) for v in vs] for k, vs in history.history.items() if k != "learning_rate"},
          "learning rates": printed, "evaluations": [[float(v) for v in e] for e in evals]})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
