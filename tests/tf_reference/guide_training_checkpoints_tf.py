"""TensorFlow's guide "Training checkpoints" (tf.train.Checkpoint, CheckpointManager, load_checkpoint).

Run by `generate_round_four.py` with the TensorFlow virtual environment, in an
empty working directory. The guide's program, with its `Dense(5)` starting
from fixed weights (``INITIAL_KERNEL``, zero bias) so distrib's port
(`examples/guide_training_checkpoints.py`) can start from the same. Prints one
``RESULT {json}`` line: the loss printed at each save of the two runs, what
the second run restored, the checkpoints kept, and the shapes
``load_checkpoint`` reads for the layer's kernel and bias.
"""
import json
import os

os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

INITIAL_KERNEL = [[0.3, -0.2, 0.1, 0.5, -0.4]]


class Net(tf.keras.Model):
  """A simple linear model."""

  def __init__(self):
    super(Net, self).__init__()
    self.l1 = tf.keras.layers.Dense(5)

  def call(self, x):
    return self.l1(x)


def toy_dataset():
  inputs = tf.range(10.)[:, None]
  labels = inputs * 5. + tf.range(5.)[None, :]
  return tf.data.Dataset.from_tensor_slices(
    dict(x=inputs, y=labels)).repeat().batch(2)


def train_step(net, example, optimizer):
  """Trains `net` on `example` using `optimizer`."""
  with tf.GradientTape() as tape:
    output = net(example['x'])
    loss = tf.reduce_mean(tf.abs(output - example['y']))
  variables = net.trainable_variables
  gradients = tape.gradient(loss, variables)
  optimizer.apply_gradients(zip(gradients, variables))
  return loss


def build():
  net = Net()
  net(tf.zeros((1, 1)))
  net.l1.set_weights([np.array(INITIAL_KERNEL, np.float32), np.zeros(5, np.float32)])
  opt = tf.keras.optimizers.Adam(0.1)
  dataset = toy_dataset()
  iterator = iter(dataset)
  ckpt = tf.train.Checkpoint(step=tf.Variable(1), optimizer=opt, net=net, iterator=iterator)
  manager = tf.train.CheckpointManager(ckpt, './tf_ckpts', max_to_keep=3)
  return net, opt, iterator, ckpt, manager


def train_and_checkpoint(net, opt, iterator, ckpt, manager, record):
  ckpt.restore(manager.latest_checkpoint)
  if manager.latest_checkpoint:
    print("Restored from {}".format(manager.latest_checkpoint))
    record["restored"].append(os.path.basename(manager.latest_checkpoint))
  else:
    print("Initializing from scratch.")
    record["restored"].append(None)

  for _ in range(50):
    example = next(iterator)
    loss = train_step(net, example, opt)
    ckpt.step.assign_add(1)
    if int(ckpt.step) % 10 == 0:
      save_path = manager.save()
      print("Saved checkpoint for step {}: {}".format(int(ckpt.step), save_path))
      print("loss {:1.2f}".format(loss.numpy()))
      record["saves"].append([int(ckpt.step), os.path.basename(save_path), float(loss.numpy())])


def main():
  record = {"restored": [], "saves": []}
  train_and_checkpoint(*build(), record)
  net, opt, iterator, ckpt, manager = build()   # the guide's second run: a new model, restored
  train_and_checkpoint(net, opt, iterator, ckpt, manager, record)
  record["checkpoints"] = [os.path.basename(p) for p in manager.checkpoints]
  reader = tf.train.load_checkpoint('./tf_ckpts/')
  shape_from_key = reader.get_variable_to_shape_map()
  key = 'net/l1/_kernel/.ATTRIBUTES/VARIABLE_VALUE'  # Keras 3's name (the guide shows Keras 2's 'kernel')
  record["kernel_shape"] = shape_from_key[key]
  record["bias_shape"] = shape_from_key['net/l1/bias/.ATTRIBUTES/VARIABLE_VALUE']
  record["kernel"] = reader.get_tensor(key).tolist()
  print("RESULT " + json.dumps(record))


if __name__ == "__main__":
  main()
