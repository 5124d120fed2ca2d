"""Keras guide "Multi-GPU distributed training with TensorFlow", ported line for line.

https://keras.io/guides/distributed_training_with_tensorflow/ — a 2-layer MLP
on MNIST trained with ``fit`` (validation data) and evaluated under
``MirroredStrategy``, then its "Using callbacks to ensure fault tolerance"
section: ``ModelCheckpoint`` saves ``ckpt-{epoch}.keras`` every epoch and a
second ``run_training`` restores the newest one with ``load_model``:

    python examples/keras_guide_multi_gpu.py                                    # 1 replica
    DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1 python examples/keras_guide_multi_gpu.py  # 2 CPU replicas
    distrib launch --workers 2 examples/keras_guide_multi_gpu.py                # 2 launched replicas

Differences from the Keras original, forced by the environment or by PyTorch:

* Data: ``keras.datasets.mnist.load_data()`` cannot download here;
  `distrib.datasets.mnist.load_data()` gives offline MNIST-shaped digits (set
  ``DISTRIB_MNIST`` to a real ``mnist.npz``). ``TUTORIAL_EXAMPLES`` (training
  plus validation examples, default all), ``TUTORIAL_VALIDATION`` (default
  10000) and ``TUTORIAL_DIR`` (where ``ckpt/`` goes, default ``.``) shorten
  the run for the tests.
* The model is a ``torch.nn.Sequential`` of ``Linear`` and ``ReLU`` layers
  wrapped in `distrib.Model` (Keras's functional ``Dense`` stack).
* ``TUTORIAL_WEIGHTS_SEED`` starts it from the seeded weights TensorFlow's run
  (``tests/tf_reference/keras_guide_multi_gpu_tf.py``) starts from, for the
  number-by-number comparison in ``tests/distributed/test_round_three_ports.py``.
* ``MirroredStrategy()`` takes every GPU; on a CPU-only machine
  ``DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1`` gives it two CPU replicas.
"""
import os

import torch

import distrib
from distrib.testing.seeded_weights import seeded_weights_from_env

EXAMPLES = int(os.environ.get("TUTORIAL_EXAMPLES", 60000))
VALIDATION = int(os.environ.get("TUTORIAL_VALIDATION", 10000))
DEVICES = os.environ.get("DISTRIB_LOCAL_DEVICES")
DEVICES = DEVICES.split(",") if DEVICES else None


def get_compiled_model():
    # Make a simple 2-layer densely-connected neural network.
    module = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),      # keras.layers.Dense(256, activation="relu")
        torch.nn.Linear(256, 256), torch.nn.ReLU(),      # keras.layers.Dense(256, activation="relu")
        torch.nn.Linear(256, 10))                        # keras.layers.Dense(10)
    model = distrib.Model(seeded_weights_from_env(module))
    model.compile(
        optimizer=distrib.optimizers.Adam(),
        loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[distrib.metrics.SparseCategoricalAccuracy()],
    )
    return model


def get_dataset():
    batch_size = 32
    num_val_samples = VALIDATION

    # Return the MNIST dataset in the form of a `distrib.data.Dataset`.
    (x_train, y_train), (x_test, y_test) = distrib.datasets.mnist.load_data()
    x_train, y_train = x_train[:EXAMPLES], y_train[:EXAMPLES]
    x_test, y_test = x_test[:EXAMPLES - VALIDATION], y_test[:EXAMPLES - VALIDATION]

    # Preprocess the data (these are Numpy arrays)
    x_train = x_train.reshape(-1, 784).astype("float32") / 255
    x_test = x_test.reshape(-1, 784).astype("float32") / 255
    y_train = y_train.astype("float32")
    y_test = y_test.astype("float32")

    # Reserve num_val_samples samples for validation
    x_val = x_train[-num_val_samples:]
    y_val = y_train[-num_val_samples:]
    x_train = x_train[:-num_val_samples]
    y_train = y_train[:-num_val_samples]
    return (
        distrib.data.Dataset.from_tensor_slices((x_train, y_train)).batch(batch_size),
        distrib.data.Dataset.from_tensor_slices((x_val, y_val)).batch(batch_size),
        distrib.data.Dataset.from_tensor_slices((x_test, y_test)).batch(batch_size),
    )


# Create a MirroredStrategy.
strategy = distrib.MirroredStrategy(DEVICES)
if strategy.is_chief:
    print("Number of devices: {}".format(strategy.num_replicas_in_sync))

# Open a strategy scope.
with strategy.scope():
    # Everything that creates variables should be under the strategy scope.
    # In general this is only model construction & `compile()`.
    model = get_compiled_model()

    # Train the model on all available devices.
    train_dataset, val_dataset, test_dataset = get_dataset()
    model.fit(train_dataset, epochs=2, validation_data=val_dataset)

    # Test the model on all available devices.
    model.evaluate(test_dataset)

# Prepare a directory to store all the checkpoints.
checkpoint_dir = os.path.join(os.environ.get("TUTORIAL_DIR", "."), "ckpt")
if strategy.is_chief and not os.path.exists(checkpoint_dir):
    os.makedirs(checkpoint_dir)
strategy.barrier()  # the other replica processes list the directory only once it exists


def make_or_restore_model():
    # Either restore the latest model, or create a fresh one
    # if there is no checkpoint available.
    checkpoints = [checkpoint_dir + "/" + name for name in os.listdir(checkpoint_dir)]
    if checkpoints:
        latest_checkpoint = max(checkpoints, key=os.path.getctime)
        if strategy.is_chief:
            print("Restoring from", latest_checkpoint)
        return distrib.models.load_model(latest_checkpoint)
    if strategy.is_chief:
        print("Creating a new model")
    return get_compiled_model()


def run_training(epochs=1):
    # Create a MirroredStrategy.
    strategy = distrib.MirroredStrategy(DEVICES)

    # Open a strategy scope and create/restore the model
    with strategy.scope():
        model = make_or_restore_model()

        callbacks = [
            # This callback saves a SavedModel every epoch
            # We include the current epoch in the folder name.
            distrib.callbacks.ModelCheckpoint(
                filepath=checkpoint_dir + "/ckpt-{epoch}.keras", save_freq="epoch"
            )
        ]
        model.fit(
            train_dataset,
            epochs=epochs,
            callbacks=callbacks,
            validation_data=val_dataset,
            verbose=2,
        )


# Running the first time creates the model
run_training(epochs=1)

# Calling the same function again will resume from where we left off
run_training(epochs=1)
