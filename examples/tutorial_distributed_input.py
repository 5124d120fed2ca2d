"""TensorFlow's "Distributed input" tutorial (tensorflow.org/tutorials/distribute/input), ported line for line.

Every code cell of the tutorial, in order, on distrib (tf.data -> distrib.data,
tf.distribute -> distrib, tf.keras.layers.StringLookup -> distrib.layers.StringLookup):

    python examples/tutorial_distributed_input.py                    # 1 replica (TF's MirroredStrategy() on a CPU)
    python examples/tutorial_distributed_input.py --devices 2        # MirroredStrategy(["cpu:0", "cpu:1"])
    DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1 python examples/...            # the same two CPU replicas
    distrib launch --workers 2 examples/tutorial_distributed_input.py   # MultiWorkerMirroredStrategy

Differences from the notebook: there is no ``tf.function`` (PyTorch runs
eagerly); TF prints a ``PerReplica`` with every local replica's value, distrib
prints ``experimental_local_results(...)`` (the same values, one per local
replica); with several local devices only replica 0 prints; the tutorial's
several ``MirroredStrategy()`` calls reuse the first strategy.
"""
import argparse
import os

# Helper libraries
import numpy as np
import torch

import distrib
from distrib.data import Dataset

_STRATEGY = []


def shapes(value):
  """A structure of tensors, printed as its shapes (the values are all 0.7, 1.0 or 2.0)."""
  if isinstance(value, (tuple, list)):
    return type(value)(shapes(v) for v in value)
  return tuple(value.shape)


def make_strategy(devices):
  """The tutorial's ``tf.distribute.MirroredStrategy()``; one per program (later calls reuse it)."""
  if not _STRATEGY:
    if "TF_CONFIG" in os.environ:
      _STRATEGY.append(distrib.MultiWorkerMirroredStrategy())
    elif devices > 1:
      _STRATEGY.append(distrib.MirroredStrategy([f"cpu:{i}" for i in range(devices)]))
    elif os.environ.get("DISTRIB_LOCAL_DEVICES"):
      _STRATEGY.append(distrib.MirroredStrategy(os.environ["DISTRIB_LOCAL_DEVICES"].split(",")))
    else:
      _STRATEGY.append(distrib.MirroredStrategy(["cpu"]))
  return _STRATEGY[0]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--devices", type=int, default=1, help="CPU replicas in this process's MirroredStrategy")
  args = parser.parse_args(argv)

  print(torch.__version__)

  # Simulate multiple CPUs with virtual devices (distrib: one process per CPU replica)
  N_VIRTUAL_DEVICES = args.devices
  print("Available devices:")
  for i, device in enumerate([f"cpu:{k}" for k in range(N_VIRTUAL_DEVICES)]):
    print("%d) %s" % (i, device))

  # ------------------------------------------------------------------ Distributed datasets
  global_batch_size = 16
  # Create a tf.data.Dataset object.
  dataset = Dataset.from_tensors(([1.], [1.])).repeat(100).batch(global_batch_size)

  def train_step(inputs):
    features, labels = inputs
    return labels - 0.3 * features

  # Iterate over the dataset using the for..in construct.
  for inputs in dataset:
    print(train_step(inputs))

  # ------------------------------------------- tf.distribute.Strategy.experimental_distribute_dataset
  global_batch_size = 16
  mirrored_strategy = make_strategy(args.devices)
  print("num_replicas_in_sync:", mirrored_strategy.num_replicas_in_sync)

  dataset = Dataset.from_tensors(([1.], [1.])).repeat(100).batch(global_batch_size)
  # Distribute input using the `experimental_distribute_dataset`.
  dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
  # 1 global batch of data fed to the model in 1 step.
  print("first batch:", shapes(mirrored_strategy.experimental_local_results(next(iter(dist_dataset)))))

  # Sharding
  dataset = Dataset.from_tensors(([1.], [1.])).repeat(64).batch(16)
  options = distrib.data.Options()
  options.experimental_distribute.auto_shard_policy = distrib.data.experimental.AutoShardPolicy.DATA
  dataset = dataset.with_options(options)

  # ---------------------------------------- tf.distribute.Strategy.distribute_datasets_from_function
  mirrored_strategy = make_strategy(args.devices)

  def dataset_fn(input_context):
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    dataset = Dataset.from_tensors(([1.], [1.])).repeat(64).batch(16)
    dataset = dataset.shard(
        input_context.num_input_pipelines, input_context.input_pipeline_id)
    dataset = dataset.batch(batch_size)
    dataset = dataset.prefetch(2)  # This prefetches 2 batches per device.
    return dataset

  dist_dataset = mirrored_strategy.distribute_datasets_from_function(dataset_fn)

  # ------------------------------------------------------------------ Distributed iterators
  # Use a Pythonic for loop construct
  global_batch_size = 16
  mirrored_strategy = make_strategy(args.devices)

  dataset = Dataset.from_tensors(([1.], [1.])).repeat(100).batch(global_batch_size)
  dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

  def train_step(inputs):
    features, labels = inputs
    return labels - 0.3 * features

  for x in dist_dataset:
    # train_step trains the model using the dataset elements
    loss = mirrored_strategy.run(train_step, args=(x,))
    print("Loss is ", shapes(mirrored_strategy.experimental_local_results(loss)))

  # Use `iter` to create an explicit iterator
  num_epochs = 10
  steps_per_epoch = 5
  for epoch in range(num_epochs):
    dist_iterator = iter(dist_dataset)
    for step in range(steps_per_epoch):
      # train_step trains the model using the dataset elements
      loss = mirrored_strategy.run(train_step, args=(next(dist_iterator),))
      # which is the same as
      # loss = mirrored_strategy.run(train_step, args=(dist_iterator.get_next(),))
      print("Loss is ", shapes(mirrored_strategy.experimental_local_results(loss)))

  # You can break the loop with `get_next_as_optional` by checking if the `Optional` contains a value
  global_batch_size = 4
  steps_per_loop = 5
  strategy = make_strategy(args.devices)

  dataset = Dataset.range(9).batch(global_batch_size)
  distributed_iterator = iter(strategy.experimental_distribute_dataset(dataset))

  def train_fn(distributed_iterator):
    for _ in range(steps_per_loop):
      optional_data = distributed_iterator.get_next_as_optional()
      if not optional_data.has_value():
        break
      per_replica_results = strategy.run(lambda x: x, args=(optional_data.get_value(),))
      print("optional:", [t.tolist() for t in strategy.experimental_local_results(per_replica_results)])
  train_fn(distributed_iterator)

  # ------------------------------------------------------------- Using the `element_spec` property
  global_batch_size = 16
  epochs = 5
  steps_per_epoch = 5
  mirrored_strategy = make_strategy(args.devices)

  dataset = Dataset.from_tensors(([1.], [1.])).repeat(100).batch(global_batch_size)
  dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
  print("element_spec:", dist_dataset.element_spec)   # TF: @tf.function(input_signature=[...])

  def train_step(per_replica_inputs):
    def step_fn(inputs):
      return 2 * inputs

    return mirrored_strategy.run(step_fn, args=(per_replica_inputs,))

  for _ in range(epochs):
    iterator = iter(dist_dataset)
    for _ in range(steps_per_epoch):
      output = train_step(next(iterator))
      print("output:", shapes(mirrored_strategy.experimental_local_results(output)))

  # ------------------------------------------------- Data preprocessing with a custom training loop
  strategy = make_strategy(args.devices)
  vocab = ["a", "b", "c", "d", "f"]

  with strategy.scope():
    # Create the layer(s) under scope.
    layer = distrib.layers.StringLookup(vocabulary=vocab)

  def dataset_fn(input_context):
    # a tf.data.Dataset
    dataset = Dataset.from_tensor_slices(["a", "c", "e"]).repeat()

    # Custom your batching, sharding, prefetching, etc.
    global_batch_size = 4
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    dataset = dataset.batch(batch_size)
    dataset = dataset.shard(
        input_context.num_input_pipelines,
        input_context.input_pipeline_id)

    # Apply the preprocessing layer(s) to the tf.data.Dataset
    def preprocess_with_kpl(input):
      return layer(input)

    processed_ds = dataset.map(preprocess_with_kpl)
    return processed_ds

  distributed_dataset = strategy.distribute_datasets_from_function(dataset_fn)

  # Print out a few example batches.
  distributed_dataset_iterator = iter(distributed_dataset)
  for _ in range(3):
    print("lookup:", [t.tolist() for t in strategy.experimental_local_results(next(distributed_dataset_iterator))])

  # ----------------------------------------------------------------- Caveats: predict with index
  mirrored_strategy = make_strategy(args.devices)
  dataset_size = 24
  batch_size = 6
  dataset = Dataset.range(dataset_size).enumerate().batch(batch_size)
  dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

  def predict(index, inputs):
    outputs = 2 * inputs
    return index, outputs

  result = {}
  for index, inputs in dist_dataset:
    output_index, outputs = mirrored_strategy.run(predict, args=(index, inputs))
    indices = list(mirrored_strategy.experimental_local_results(output_index))
    rindices = []
    for a in indices:
      rindices.extend(a.cpu().numpy())  # torch's .numpy() does not copy from a GPU; TF's does
    outputs = list(mirrored_strategy.experimental_local_results(outputs))
    routputs = []
    for a in outputs:
      routputs.extend(a.cpu().numpy())
    for i, value in zip(rindices, routputs):
      result[i] = value

  print("predict with index:", {int(i): int(v) for i, v in result.items()})

  # ---------------------------------------- Tensor inputs: experimental_distribute_values_from_function
  mirrored_strategy = make_strategy(args.devices)

  def value_fn(ctx):
    return torch.tensor(ctx.replica_id_in_sync_group)

  distributed_values = mirrored_strategy.experimental_distribute_values_from_function(value_fn)
  for _ in range(4):
    result = mirrored_strategy.run(lambda x: x, args=(distributed_values,))
    print("values:", [int(t) for t in mirrored_strategy.experimental_local_results(result)])

  # --------------------------------------------------------- tf.data.Dataset.from_generator
  mirrored_strategy = make_strategy(args.devices)
  def input_gen():
    while True:
      yield np.random.rand(4)

  # use Dataset.from_generator
  dataset = Dataset.from_generator(
      input_gen, output_types=(torch.float32), output_shapes=[4])
  dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
  iterator = iter(dist_dataset)
  for _ in range(4):
    result = mirrored_strategy.run(lambda x: x, args=(next(iterator),))
    print("generator:", shapes(mirrored_strategy.experimental_local_results(result)))


if __name__ == "__main__":
  main()
