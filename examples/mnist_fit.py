"""TensorFlow's multi-worker Keras tutorial (``mnist_setup.py`` + ``main.py``), ported line for line.

Run alone (one worker):        python examples/mnist_fit.py
Run on 2 workers:              distrib launch --workers 2 examples/mnist_fit.py

The data is `distrib.datasets.mnist.load_data()`: real handwritten digits
available offline (set ``DISTRIB_MNIST`` to a real ``mnist.npz`` for MNIST
itself). ``MNIST_EPOCHS`` / ``MNIST_STEPS`` shorten the run for tests, and
``MNIST_MODEL_PATH`` adds the tutorial's save / load step: every worker
calls ``save`` and only the chief's copy lands there (no ``write_filepath``
helper needed).
"""
import os

import numpy as np
import torch

import distrib


# ---------------------------------------------------------------- mnist_setup.py
def mnist_dataset(batch_size):
  (x_train, y_train), _ = distrib.datasets.mnist.load_data()
  # The `x` arrays are in uint8 and have values in the [0, 255] range.
  # You need to convert them to float32 with values in the [0, 1] range.
  x_train = x_train / np.float32(255)
  y_train = y_train.astype(np.int64)
  train_dataset = distrib.data.Dataset.from_tensor_slices(
      (x_train, y_train)).shuffle(60000).repeat().batch(batch_size)
  return train_dataset


def build_cnn():
  """The tutorial's Sequential model as a torch module (standard layers: load_model rebuilds it)."""
  return torch.nn.Sequential(
      torch.nn.Unflatten(1, (1, 28)),                       # InputLayer((28, 28)) + Reshape((28, 28, 1))
      torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(),           # Conv2D(32, 3, activation='relu')
      torch.nn.Flatten(),                                   # Flatten()
      torch.nn.Linear(26 * 26 * 32, 128), torch.nn.ReLU(),  # Dense(128, activation='relu')
      torch.nn.Linear(128, 10))                             # Dense(10)


def build_and_compile_cnn_model():
  model = distrib.Model(build_cnn())
  model.compile(
      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
      optimizer=distrib.optimizers.SGD(learning_rate=0.001),
      metrics=['accuracy'])
  return model


# ----------------------------------------------------------------------- main.py
def main():
  epochs = int(os.environ.get("MNIST_EPOCHS", 3))
  steps_per_epoch = int(os.environ.get("MNIST_STEPS", 70))

  per_worker_batch_size = 64
  strategy = distrib.MultiWorkerMirroredStrategy()
  # TF_CONFIG lists the workers (``distrib launch`` sets it); without it this is one worker.
  num_workers = strategy.num_replicas_in_sync

  global_batch_size = per_worker_batch_size * num_workers
  multi_worker_dataset = mnist_dataset(global_batch_size)

  with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = build_and_compile_cnn_model()

  multi_worker_model.fit(multi_worker_dataset, epochs=epochs, steps_per_epoch=steps_per_epoch)

  model_path = os.environ.get("MNIST_MODEL_PATH")
  if model_path:
    multi_worker_model.save(model_path)       # every worker; only the chief's copy lands
    with strategy.scope():
      loaded_model = distrib.models.load_model(model_path)
    # Now that the model is restored, and can continue with the training.
    loaded_model.fit(multi_worker_dataset, epochs=2, steps_per_epoch=max(1, steps_per_epoch // 3))


if __name__ == "__main__":
  main()
