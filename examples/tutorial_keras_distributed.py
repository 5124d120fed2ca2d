"""TF tutorial "Distributed training with Keras" (MirroredStrategy + Model.fit), ported line for line.

    python examples/tutorial_keras_distributed.py                                   # 1 replica
    DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1 python examples/tutorial_keras_distributed.py # 2 CPU replicas
    distrib launch --workers 2 examples/tutorial_keras_distributed.py               # 2 launched replicas

Differences from the TF original, all forced by the environment or by PyTorch:

* Data: ``tfds.load('mnist', with_info=True)`` cannot download here; the
  images come from `distrib.datasets.mnist.load_data()` (offline
  MNIST-shaped digits; ``DISTRIB_MNIST`` points it at a real ``mnist.npz``),
  channels first ``(1, 28, 28)`` as PyTorch's ``Conv2d`` expects.
  ``TUTORIAL_EXAMPLES`` / ``TUTORIAL_EPOCHS`` shorten the run (tests use
  them); files go to the current directory as in the tutorial.
* For the number-by-number comparison with TensorFlow's run
  (``tests/tf_reference/tutorial_keras_tf.py``): ``TUTORIAL_BUFFER_SIZE=1``
  keeps the data in order, ``TUTORIAL_WEIGHTS_SEED`` starts from the seeded
  weights TensorFlow's run starts from (`distrib.testing.seeded_weights`).
* ``tf.distribute.MirroredStrategy()`` takes every GPU; on a CPU-only machine
  ``DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1`` gives it two CPU replicas.
* ``!ls`` cells become prints of the directory listings (chief only).
* At the end (a distrib addition, the tutorial's "export" step): the model is
  exported with `distrib.saved_model` and served without the training code.
"""
import os

import numpy as np
import torch

import distrib
from distrib.testing.seeded_weights import seeded_weights_from_env

EXAMPLES = int(os.environ.get("TUTORIAL_EXAMPLES", 60000))

# Download the dataset
(x_train, y_train), (x_test, y_test) = distrib.datasets.mnist.load_data()
mnist_train = distrib.data.Dataset.from_tensor_slices((x_train[:EXAMPLES, None], y_train[:EXAMPLES]))
mnist_test = distrib.data.Dataset.from_tensor_slices((x_test[:EXAMPLES, None], y_test[:EXAMPLES]))

# Define the distribution strategy
devices = os.environ.get("DISTRIB_LOCAL_DEVICES")
strategy = distrib.MirroredStrategy(devices.split(",") if devices else None)
print('Number of devices: {}'.format(strategy.num_replicas_in_sync))

# Set up the input pipeline
num_train_examples = len(x_train[:EXAMPLES])
num_test_examples = len(x_test[:EXAMPLES])

BUFFER_SIZE = int(os.environ.get("TUTORIAL_BUFFER_SIZE", 10000))

BATCH_SIZE_PER_REPLICA = 64
BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync


def scale(image, label):
  image = image.to(torch.float32)        # tf.cast(image, tf.float32)
  image /= 255

  return image, label


train_dataset = mnist_train.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)
eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE)

# Create the model and instantiate the optimizer
torch.manual_seed(0)
with strategy.scope():
  model = distrib.Model(torch.nn.Sequential(
      torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(),          # Conv2D(32, 3, activation='relu', input_shape=(28, 28, 1))
      torch.nn.MaxPool2d(2),                               # MaxPooling2D()
      torch.nn.Flatten(),                                  # Flatten()
      torch.nn.Linear(32 * 13 * 13, 64), torch.nn.ReLU(),  # Dense(64, activation='relu')
      torch.nn.Linear(64, 10)                              # Dense(10)
  ))
  seeded_weights_from_env(model)     # tests only: TensorFlow's initial weights (see the docstring)

  model.compile(loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                optimizer=distrib.optimizers.Adam(),
                metrics=['accuracy'])

# Define the callbacks
# Define the checkpoint directory to store the checkpoints.
checkpoint_dir = './training_checkpoints'
# Define the name of the checkpoint files.
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch}")


# Define a function for decaying the learning rate.
# You can define any decay function you need.
def decay(epoch):
  if epoch < 3:
    return 1e-3
  elif epoch >= 3 and epoch < 7:
    return 1e-4
  else:
    return 1e-5


# Define a callback for printing the learning rate at the end of each epoch.
class PrintLR(distrib.callbacks.Callback):
  def on_epoch_end(self, epoch, logs=None):
    print('\nLearning rate for epoch {} is {}'.format(epoch + 1, model.optimizer.learning_rate.numpy()))


# Put all the callbacks together.
callbacks = [
    distrib.callbacks.TensorBoard(log_dir='./logs'),
    distrib.callbacks.ModelCheckpoint(filepath=checkpoint_prefix,
                                      save_weights_only=True),
    distrib.callbacks.LearningRateScheduler(decay),
    PrintLR()
]

# Train and evaluate
EPOCHS = int(os.environ.get("TUTORIAL_EPOCHS", 12))

model.fit(train_dataset, epochs=EPOCHS, callbacks=callbacks)

# Check the checkpoint directory:
if strategy.is_chief:
  print("checkpoints:", sorted(os.listdir(checkpoint_dir)))

# Restore the latest checkpoint and call evaluate on the test data:
model.load_weights(distrib.train.latest_checkpoint(checkpoint_dir))

eval_loss, eval_acc = model.evaluate(eval_dataset)

print('Eval loss: {}, Eval accuracy: {}'.format(eval_loss, eval_acc))

if strategy.is_chief:
  print("logs:", sorted(os.listdir('./logs')))

# Save the model
path = 'my_model.keras'

model.save(path)

# Load the model without strategy.scope():
unreplicated_model = distrib.models.load_model(path)

unreplicated_model.compile(
    loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=distrib.optimizers.Adam(),
    metrics=['accuracy'])

eval_loss, eval_acc = unreplicated_model.evaluate(eval_dataset)

print('Eval loss: {}, Eval Accuracy: {}'.format(eval_loss, eval_acc))

# Load the model with strategy.scope():
with strategy.scope():
  replicated_model = distrib.models.load_model(path)
  replicated_model.compile(loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                           optimizer=distrib.optimizers.Adam(),
                           metrics=['accuracy'])

  eval_loss, eval_acc = replicated_model.evaluate(eval_dataset)
  print('Eval loss: {}, Eval Accuracy: {}'.format(eval_loss, eval_acc))

# (distrib addition) Export for serving and check the served predictions:
model.export('exported_model', input_signature=[distrib.TensorSpec(shape=(None, 1, 28, 28), dtype=torch.float32)])
serve = distrib.saved_model.load('exported_model').signatures['serving_default']
images, labels = next(iter(eval_dataset))
predictions = model.predict(images, verbose=0)          # every worker: predict is collective
if strategy.is_chief:
  print("served predictions match:", bool(np.allclose(serve(images)['output_0'].numpy(), predictions, atol=1e-5)))
