"""Keras guide "Multi-GPU distributed training with TensorFlow" on TensorFlow, for the port's comparison.

Run by ``generate_round_three.py`` with the TensorFlow virtual environment:
the guide's program on the port's MNIST subset (``DATA``: the first
``settings["examples"]`` training images, validation the last
``settings["validation"]`` of them) from the port's seeded weights. Prints
``RESULT {"devices", "fit", "evaluate", "runs", "restored"}``: the first
``fit``'s history, the evaluation, the two ``run_training`` histories and
which checkpoint the second one restored::

    python keras_guide_multi_gpu_tf.py MODE DATA.npz SETTINGS_JSON
"""
import json
import os
import sys
import tempfile

import keras
import tensorflow as tf

from tutorial_common_tf import emit, mnist, set_seeded_weights, strategy as make_strategy

LAYOUTS = ["dense", "same"] * 3


def main(mode, data, settings):
    strategy = make_strategy(mode)
    examples, validation = settings["examples"], settings["validation"]

    def get_compiled_model():
        inputs = keras.Input(shape=(784,))
        x = keras.layers.Dense(256, activation="relu")(inputs)
        x = keras.layers.Dense(256, activation="relu")(x)
        outputs = keras.layers.Dense(10)(x)
        model = keras.Model(inputs, outputs)
        set_seeded_weights(model, settings["weights_seed"], LAYOUTS)
        model.compile(
            optimizer=keras.optimizers.Adam(),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[keras.metrics.SparseCategoricalAccuracy()],
        )
        return model

    def get_dataset():
        batch_size = 32
        num_val_samples = validation
        (x_train, y_train), (x_test, y_test) = mnist(data)
        x_train, y_train = x_train[:examples], y_train[:examples]
        x_test, y_test = x_test[:examples - validation], y_test[:examples - validation]
        x_train = x_train.reshape(-1, 784).astype("float32") / 255
        x_test = x_test.reshape(-1, 784).astype("float32") / 255
        y_train = y_train.astype("float32")
        y_test = y_test.astype("float32")
        x_val = x_train[-num_val_samples:]
        y_val = y_train[-num_val_samples:]
        x_train = x_train[:-num_val_samples]
        y_train = y_train[:-num_val_samples]
        return (
            tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(batch_size),
            tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(batch_size),
            tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(batch_size),
        )

    with strategy.scope():
        model = get_compiled_model()
        train_dataset, val_dataset, test_dataset = get_dataset()
        fit = model.fit(train_dataset, epochs=2, validation_data=val_dataset, verbose=0).history
        evaluation = model.evaluate(test_dataset, verbose=0)

    checkpoint_dir = os.path.join(tempfile.mkdtemp(), "ckpt")
    os.makedirs(checkpoint_dir)
    restored = []

    def make_or_restore_model():
        checkpoints = [checkpoint_dir + "/" + name for name in os.listdir(checkpoint_dir)]
        if checkpoints:
            latest_checkpoint = max(checkpoints, key=os.path.getctime)
            restored.append(os.path.basename(latest_checkpoint))
            return keras.models.load_model(latest_checkpoint)
        return get_compiled_model()

    runs = []

    def run_training(epochs=1):
        with strategy.scope():
            model = make_or_restore_model()
            callbacks = [keras.callbacks.ModelCheckpoint(filepath=checkpoint_dir + "/ckpt-{epoch}.keras",
                                                         save_freq="epoch")]
            runs.append(model.fit(train_dataset, epochs=epochs, callbacks=callbacks, validation_data=val_dataset,
                                  verbose=0).history)

    run_training(epochs=1)
    run_training(epochs=1)
    emit({"devices": strategy.num_replicas_in_sync, "fit": fit, "evaluate": [float(v) for v in evaluation],
          "runs": runs, "restored": restored})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
