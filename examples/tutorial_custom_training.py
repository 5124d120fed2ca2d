"""TensorFlow's tutorial "Custom training with tf.distribute.Strategy", ported line for line.

https://www.tensorflow.org/tutorials/distribute/custom_training — a CNN
trained with a custom loop under `MirroredStrategy`: global batch size,
`experimental_distribute_dataset`, per-example losses scaled with
`compute_average_loss` (plus `scale_regularization_loss` for the model's L2
terms), metrics, `strategy.run` / `strategy.reduce`, a checkpoint restored
without the strategy, and the tutorial's two other ways of iterating.

**Data.** Fashion-MNIST cannot be downloaded here, so this port trains on
distrib's offline MNIST (`distrib.datasets.mnist.load_data()`: real
handwritten digits, the same shapes — 28x28 uint8 images, 10 classes; point
``DISTRIB_MNIST`` at a real ``mnist.npz`` to use MNIST itself).

What differs from the TensorFlow program, and why:
  * the model is a ``torch.nn.Module`` (channels-last input, as in Keras) whose
    ``losses`` property gives the L2 terms Keras's ``kernel_regularizer`` adds;
  * a step is plain PyTorch: ``loss.backward(); optimizer.step()`` instead of a
    ``GradientTape`` and ``apply_gradients``; ``@tf.function`` is dropped;
  * the whole script runs in every replica (distrib runs one process per
    replica), so prints are guarded by ``strategy.is_chief`` — after every
    worker has called the metrics' ``result()``, which is a collective.

Run:
    python examples/tutorial_custom_training.py                    # MirroredStrategy(): every GPU, else the CPU
    DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1 python examples/tutorial_custom_training.py   # 2 CPU replicas
    distrib launch --workers 2 examples/tutorial_custom_training.py                 # MultiWorkerMirroredStrategy

Options (defaults are the tutorial's): ``--epochs``, ``--batch-size-per-replica``,
``--train-examples``/``--test-examples`` (a prefix of each split),
``--checkpoint-dir``, ``--seed`` (seeds torch and the shuffle, for reproducible
runs), ``--strategy mirrored|multi_worker`` (default: ``multi_worker`` when
``TF_CONFIG`` is set, as under ``distrib launch``). Two options exist for the
number-by-number comparison with TensorFlow's run of the tutorial
(``tests/tf_reference/tutorial_custom_training_tf.py``):
``--shuffle-buffer 1`` keeps the data in order, ``--initial-weights-seed N``
starts from the seeded weights TensorFlow's run starts from
(`distrib.testing.seeded_weights`).
"""
import argparse
import os

import numpy as np
import torch

import distrib

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--strategy", choices=["mirrored", "multi_worker"],
                    default="multi_worker" if os.environ.get("TF_CONFIG") else "mirrored")
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--batch-size-per-replica", type=int, default=64)
parser.add_argument("--train-examples", type=int, default=None)
parser.add_argument("--test-examples", type=int, default=None)
parser.add_argument("--checkpoint-dir", default="./training_checkpoints")
parser.add_argument("--seed", type=int, default=None)
parser.add_argument("--shuffle-buffer", type=int, default=None)
parser.add_argument("--initial-weights-seed", type=int, default=None)
args = parser.parse_args()
if args.seed is not None:
  torch.manual_seed(args.seed)

# ## Download the Fashion MNIST dataset (here: distrib's offline MNIST, see above)

fashion_mnist = distrib.datasets.mnist

(train_images, train_labels), (test_images, test_labels) = fashion_mnist.load_data()
train_images, train_labels = train_images[:args.train_examples], train_labels[:args.train_examples]
test_images, test_labels = test_images[:args.test_examples], test_labels[:args.test_examples]

# Add a dimension to the array -> new shape == (28, 28, 1)
# This is done because the first layer in our model is a convolutional
# layer and it requires a 4D input (batch_size, height, width, channels).
# batch_size dimension will be added later on.
train_images = train_images[..., None]
test_images = test_images[..., None]

# Scale the images to the [0, 1] range.
train_images = train_images / np.float32(255)
test_images = test_images / np.float32(255)
train_labels = train_labels.astype(np.int64)
test_labels = test_labels.astype(np.int64)

# ## Create a strategy to distribute the variables and the graph

# If the list of devices is not specified in
# `distrib.MirroredStrategy` constructor, they will be auto-detected
# (every GPU, else the CPU; DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1 gives 2 CPU replicas).
if args.strategy == "multi_worker":
  # The multi-worker tutorial's one-line change: TF_CONFIG describes the cluster.
  strategy = distrib.MultiWorkerMirroredStrategy()
else:
  strategy = distrib.MirroredStrategy()

if strategy.is_chief:
  print('Number of devices: {}'.format(strategy.num_replicas_in_sync))

# ## Setup input pipeline

BUFFER_SIZE = args.shuffle_buffer or len(train_images)

BATCH_SIZE_PER_REPLICA = args.batch_size_per_replica
GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync

EPOCHS = args.epochs

train_dataset = distrib.data.Dataset.from_tensor_slices((train_images, train_labels)).shuffle(
    BUFFER_SIZE, seed=args.seed).batch(GLOBAL_BATCH_SIZE)
test_dataset = distrib.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(GLOBAL_BATCH_SIZE)

train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)


# ## Create the model

class ChannelsFirst(torch.nn.Module):
  """Keras's images are (height, width, channels); torch's convolutions want channels first."""

  def forward(self, x):
    return x.permute(0, 3, 1, 2)


class Sequential(torch.nn.Sequential):
  """`torch.nn.Sequential` with Keras's ``model.losses``: L2 on every kernel (``kernel_regularizer``)."""

  def __init__(self, *layers, l2=0.0):
    super().__init__(*layers)
    self.l2 = l2

  @property
  def losses(self):
    kernels = [m.weight for m in self if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    return [self.l2 * (k ** 2).sum() for k in kernels] if self.l2 else []


def create_model():
  model = Sequential(
      ChannelsFirst(),
      torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(),        # Conv2D(32, 3, activation='relu')
      torch.nn.MaxPool2d(2),                             # MaxPooling2D()
      torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(),       # Conv2D(64, 3, activation='relu')
      torch.nn.MaxPool2d(2),
      torch.nn.Flatten(),
      torch.nn.Linear(64 * 5 * 5, 64), torch.nn.ReLU(),  # Dense(64, activation='relu')
      torch.nn.Linear(64, 10),                           # Dense(10)
      l2=1e-5)                                           # regularizers.L2(1e-5) on every kernel

  return model


# Create a checkpoint directory to store the checkpoints.
checkpoint_dir = args.checkpoint_dir
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")

# ## Define the loss function

with strategy.scope():
  # Set reduction to `NONE` so you can do the reduction yourself.
  loss_object = distrib.losses.SparseCategoricalCrossentropy(
      from_logits=True,
      reduction=distrib.losses.Reduction.NONE)

  def compute_loss(labels, predictions, model_losses):
    per_example_loss = loss_object(labels, predictions)
    loss = distrib.nn.compute_average_loss(per_example_loss)
    if model_losses:
      loss += distrib.nn.scale_regularization_loss(torch.stack(model_losses).sum())
    return loss

# ## Define the metrics to track loss and accuracy

with strategy.scope():
  test_loss = distrib.metrics.Mean(name='test_loss')

  train_accuracy = distrib.metrics.SparseCategoricalAccuracy(
      name='train_accuracy')
  test_accuracy = distrib.metrics.SparseCategoricalAccuracy(
      name='test_accuracy')

# ## Training loop

# A model, an optimizer, and a checkpoint must be created under `strategy.scope`.
with strategy.scope():
  model = create_model()
  if args.initial_weights_seed is not None:  # the weights TensorFlow's reference run starts from
    from distrib.testing.seeded_weights import seeded_weights
    seeded_weights(model, args.initial_weights_seed)

  optimizer = distrib.optimizers.KerasAdam(model.parameters())  # tf.keras.optimizers.Adam(): Keras's update rule

  checkpoint = distrib.train.Checkpoint(optimizer=optimizer, model=model)


def train_step(inputs):
  images, labels = inputs

  model.train()
  predictions = model(images)
  loss = compute_loss(labels, predictions, model.losses)

  optimizer.zero_grad()
  loss.backward()
  optimizer.step()

  train_accuracy.update_state(labels, predictions.detach())
  return loss.detach()


def test_step(inputs):
  images, labels = inputs

  model.eval()
  with torch.no_grad():
    predictions = model(images)
    t_loss = loss_object(labels, predictions)

  test_loss.update_state(t_loss)
  test_accuracy.update_state(labels, predictions)


# `run` replicates the provided computation and runs it
# with the distributed input.
def distributed_train_step(dataset_inputs):
  per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
  return strategy.reduce(distrib.ReduceOp.SUM, per_replica_losses,
                         axis=None)


def distributed_test_step(dataset_inputs):
  return strategy.run(test_step, args=(dataset_inputs,))


for epoch in range(EPOCHS):
  # TRAIN LOOP
  total_loss = 0.0
  num_batches = 0
  for x in train_dist_dataset:
    total_loss += distributed_train_step(x)
    num_batches += 1
  train_loss = total_loss / num_batches

  # TEST LOOP
  for x in test_dist_dataset:
    distributed_test_step(x)

  if epoch % 2 == 0:
    checkpoint.save(checkpoint_prefix)

  template = ("Epoch {}, Loss: {}, Accuracy: {}, Test Loss: {}, "
              "Test Accuracy: {}")
  line = template.format(epoch + 1, float(train_loss),
                         float(train_accuracy.result() * 100), float(test_loss.result()),
                         float(test_accuracy.result() * 100))
  if strategy.is_chief:
    print(line)

  test_loss.reset_states()
  train_accuracy.reset_states()
  test_accuracy.reset_states()

# ## Restore the latest checkpoint and test
#
# A model checkpointed with a strategy can be restored with or without a strategy.

eval_accuracy = distrib.metrics.SparseCategoricalAccuracy(
    name='eval_accuracy')

new_model = create_model()
new_optimizer = distrib.optimizers.KerasAdam(new_model.parameters())

test_dataset = distrib.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(GLOBAL_BATCH_SIZE)


def eval_step(images, labels):
  new_model.eval()
  with torch.no_grad():
    predictions = new_model(images)
  eval_accuracy(labels, predictions)


checkpoint = distrib.train.Checkpoint(optimizer=new_optimizer, model=new_model)
checkpoint.restore(distrib.train.latest_checkpoint(checkpoint_dir))

for images, labels in test_dataset:
  eval_step(images, labels)

if strategy.is_chief:
  print('Accuracy after restoring the saved model without strategy: {}'.format(
      float(eval_accuracy.result() * 100)))

# ## Alternate ways of iterating over a dataset
#
# ### Using iterators: a given number of steps, not the entire dataset.

for epoch in range(EPOCHS):
  total_loss = 0.0
  num_batches = 0
  train_iter = iter(train_dist_dataset)

  for _ in range(10):
    total_loss += distributed_train_step(next(train_iter))
    num_batches += 1
  average_train_loss = total_loss / num_batches

  template = ("Epoch {}, Loss: {}, Accuracy: {}")
  line = template.format(epoch + 1, float(average_train_loss), float(train_accuracy.result() * 100))
  if strategy.is_chief:
    print(line)
  train_accuracy.reset_states()


# ### Iterating inside a function (a `tf.function` in TensorFlow; a plain function here)

def distributed_train_epoch(dataset):
  total_loss = 0.0
  num_batches = 0
  for x in dataset:
    per_replica_losses = strategy.run(train_step, args=(x,))
    total_loss += strategy.reduce(
      distrib.ReduceOp.SUM, per_replica_losses, axis=None)
    num_batches += 1
  return total_loss / float(num_batches)


for epoch in range(EPOCHS):
  train_loss = distributed_train_epoch(train_dist_dataset)

  template = ("Epoch {}, Loss: {}, Accuracy: {}")
  line = template.format(epoch + 1, float(train_loss), float(train_accuracy.result() * 100))
  if strategy.is_chief:
    print(line)

  train_accuracy.reset_states()
