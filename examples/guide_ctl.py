"""TensorFlow's distributed training guide: "Use tf.distribute.Strategy with custom training loops" and "Default Strategy".

The guide's one-``Dense``-layer model trained with a custom loop — the model
and optimizer created in the scope, ``experimental_distribute_dataset``,
per-example losses scaled by the global batch, ``strategy.run`` and
``strategy.reduce`` — first over the whole distributed dataset, then for a
given number of steps with ``iter``/``next``; then the guide's two snippets
on the default strategy.

    python examples/guide_ctl.py                                   # default strategy
    python examples/guide_ctl.py --strategy mirrored               # 2 CPU replicas, one script
    python examples/guide_ctl.py --strategy central_storage        # 2 replicas in one process
    python examples/guide_ctl.py --strategy one_device
    distrib launch --workers 2 examples/guide_ctl.py               # MultiWorkerMirroredStrategy

Each step prints the loss summed over the replicas (the global batch's mean
loss); only the chief prints, since every replica runs the script. Every
example is the same, so with the same ``--seed`` (initial weights) every
strategy prints the same losses — the global-batch scaling at work.
"""
import argparse
import os

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


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--strategy", choices=["default", "one_device", "mirrored", "central_storage", "multi_worker"],
                    default="multi_worker" if os.environ.get("TF_CONFIG") else "default")
parser.add_argument("--seed", type=int, default=None, help="seed torch (the initial weights) for reproducible runs")
args = parser.parse_args()
if args.seed is not None:
  torch.manual_seed(args.seed)

mirrored_strategy = make_strategy(args.strategy)

# Compute a global batch size using a number of replicas (from the guide's Keras section).
BATCH_SIZE_PER_REPLICA = 5
global_batch_size = (BATCH_SIZE_PER_REPLICA *
                     mirrored_strategy.num_replicas_in_sync)

# First, create the model and optimizer inside the strategy's scope.
with mirrored_strategy.scope():
  model = torch.nn.Linear(1, 1)         # tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(1,))])
  optimizer = torch.optim.SGD(model.parameters(), lr=0.01)   # tf.keras.optimizers.SGD()

# Next, create the input dataset and distribute it according to the strategy.
dataset = distrib.data.Dataset.from_tensors(([1.], [1.])).repeat(1000).batch(
    global_batch_size)
dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

# Then, define one step of the training.
loss_object = distrib.losses.BinaryCrossentropy(
  from_logits=True,
  reduction=distrib.losses.Reduction.NONE)


def compute_loss(labels, predictions):
  per_example_loss = loss_object(labels, predictions)
  return distrib.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)


def train_step(inputs):
  features, labels = inputs

  predictions = model(features)
  loss = compute_loss(labels, predictions)

  optimizer.zero_grad()
  loss.backward()                       # gradients are summed across replicas ...
  optimizer.step()                      # ... before the optimizer applies them
  return loss.detach()


def distributed_train_step(dist_inputs):
  per_replica_losses = mirrored_strategy.run(train_step, args=(dist_inputs,))
  return mirrored_strategy.reduce(distrib.ReduceOp.SUM, per_replica_losses,
                                  axis=None)


def print_on_chief(*values):
  if mirrored_strategy.is_chief:
    print(*values)


# Finally, iterate over `dist_dataset` and run the training in a loop.
for dist_inputs in dist_dataset:
  print_on_chief(float(distributed_train_step(dist_inputs)))

# Or for a given number of steps, with an iterator.
iterator = iter(dist_dataset)
for _ in range(10):
  print_on_chief(float(distributed_train_step(next(iterator))))

# ## Default strategy
# In optimizer or other library code: get the currently active strategy.
strategy = distrib.get_strategy()
print_on_chief("default strategy reduce:", float(strategy.reduce("SUM", 1., axis=None)))  # reduce some values

# End-user code that runs with or without a distribution strategy.
if torch.cuda.is_available():
  strategy = distrib.MirroredStrategy()
else:  # Use the Default Strategy
  strategy = distrib.get_strategy()

with strategy.scope():
  # Do something interesting
  print_on_chief(distrib.train.Variable(1.))
