"""TensorFlow's distributed training guide, section "Use tf.distribute.Strategy with Keras Model.fit".

The one-``Dense``-layer model, trained on a dataset and on numpy arrays:

    python examples/guide_keras.py                                   # default strategy
    python examples/guide_keras.py --strategy mirrored               # 2 CPU replicas, one script
    python examples/guide_keras.py --strategy central_storage        # 2 replicas in one process
    python examples/guide_keras.py --strategy one_device
    distrib launch --workers 2 examples/guide_keras.py               # MultiWorkerMirroredStrategy

Each batch of the input is divided equally among the replicas: with 2
replicas, each batch of 10 gives 5 examples to each.
"""
import argparse
import os

import numpy as np
import torch

import distrib


def make_strategy(name):
  if name == "multi_worker":
    return distrib.MultiWorkerMirroredStrategy()
  if name == "mirrored":
    return distrib.MirroredStrategy(["cpu:0", "cpu:1"])
  if name == "central_storage":
    return distrib.experimental.CentralStorageStrategy(["cpu:0", "cpu:1"])
  if name == "one_device":
    return distrib.OneDeviceStrategy("cpu")
  return distrib.get_strategy()      # the default strategy


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--strategy", choices=["default", "one_device", "mirrored", "central_storage", "multi_worker"],
                      default="multi_worker" if "TF_CONFIG" in os.environ else "default")
  args = parser.parse_args(argv)

  mirrored_strategy = make_strategy(args.strategy)

  with mirrored_strategy.scope():
    model = distrib.Model(torch.nn.Linear(1, 1))   # tf.keras.Sequential([Dense(1, input_shape=(1,))])

  model.compile(loss='mse', optimizer='sgd')

  dataset = distrib.data.Dataset.from_tensors(([1.], [1.])).repeat(100).batch(10)
  model.fit(dataset, epochs=2)
  model.evaluate(dataset)

  inputs, targets = np.ones((100, 1)), np.ones((100, 1))
  model.fit(inputs, targets, epochs=2, batch_size=10)

  if mirrored_strategy.is_chief:
    print("num_replicas_in_sync:", mirrored_strategy.num_replicas_in_sync)

  # Compute a global batch size using a number of replicas.
  BATCH_SIZE_PER_REPLICA = 5
  global_batch_size = (BATCH_SIZE_PER_REPLICA *
                       mirrored_strategy.num_replicas_in_sync)
  dataset = distrib.data.Dataset.from_tensors(([1.], [1.])).repeat(100)
  dataset = dataset.batch(global_batch_size)

  LEARNING_RATES_BY_BATCH_SIZE = {5: 0.1, 10: 0.15, 20: 0.175}
  learning_rate = LEARNING_RATES_BY_BATCH_SIZE[global_batch_size]
  model.optimizer.learning_rate = learning_rate
  history = model.fit(dataset, epochs=2, verbose=0)
  return model, history


if __name__ == "__main__":
  main()
