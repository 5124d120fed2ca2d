"""The dataset, the dataset function and the CNN: ``mnist.py`` of TensorFlow's custom training loop
tutorial with MultiWorkerMirroredStrategy, ported.

The data comes from `distrib.datasets.mnist.load_data()` (real handwritten
digits, offline; point ``DISTRIB_MNIST`` at a real mnist.npz for MNIST itself).
"""
import os

import numpy as np
import torch

import distrib


def mnist_dataset(batch_size):
  (x_train, y_train), _ = distrib.datasets.mnist.load_data()
  # The `x` arrays are in uint8 and have values in the range [0, 255].
  # You need to convert them to float32 with values in the range [0, 1]
  x_train = x_train / np.float32(255)
  y_train = y_train.astype(np.int64)
  train_dataset = distrib.data.Dataset.from_tensor_slices(
      (x_train, y_train)).shuffle(60000)
  return train_dataset


def dataset_fn(global_batch_size, input_context):
  batch_size = input_context.get_per_replica_batch_size(global_batch_size)
  dataset = mnist_dataset(batch_size)
  dataset = dataset.shard(input_context.num_input_pipelines,
                          input_context.input_pipeline_id)
  dataset = dataset.batch(batch_size)
  return dataset


class CNN(torch.nn.Sequential):
  """The tutorials' Keras CNN: Reshape, Conv2D(32, 3, relu), Flatten, Dense(128, relu), Dense(10).

  ``losses`` holds the L2(1e-5) kernel regularisation terms, like Keras's
  ``model.losses``.
  """

  def __init__(self, l2=1e-5):
    super().__init__(
        torch.nn.Unflatten(1, (1, 28)),          # Reshape(target_shape=(28, 28, 1))
        torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(26 * 26 * 32, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    self.l2 = l2

  @property
  def losses(self):
    kernels = [self[1].weight, self[4].weight, self[6].weight]
    return [self.l2 * (k ** 2).sum() for k in kernels]


def build_cnn_model():
  return CNN()
