"""``main.py`` of TensorFlow's custom training loop tutorial with MultiWorkerMirroredStrategy, ported.

Run alone:               python examples/mnist_ctl.py
Run on 2 workers:        distrib launch --workers 2 examples/mnist_ctl.py

Checkpoints go to ``$MNIST_CKPT_DIR`` (default: ``<tmp>/distrib_mnist_ctl/ckpt``);
run it again and it resumes from the last epoch, as the tutorial does. The tutorial's
``_is_chief``/``write_filepath`` helpers are gone: every worker calls
``checkpoint_manager.save()``, only the chief's files land in the directory.
"""
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import distrib
import mnist

per_worker_batch_size = 64
strategy = distrib.MultiWorkerMirroredStrategy()
num_workers = strategy.num_replicas_in_sync
global_batch_size = per_worker_batch_size * num_workers
num_epochs = int(os.environ.get("MNIST_EPOCHS", 3))
num_steps_per_epoch = int(os.environ.get("MNIST_STEPS", 70))

with strategy.scope():
  # Model building needs to be within `strategy.scope()`.
  multi_worker_model = mnist.build_cnn_model()
  multi_worker_dataset = strategy.distribute_datasets_from_function(
      lambda input_context: mnist.dataset_fn(global_batch_size, input_context))
  optimizer = torch.optim.RMSprop(multi_worker_model.parameters(), lr=0.001, alpha=0.9, eps=1e-7)
  train_accuracy = distrib.metrics.SparseCategoricalAccuracy(name='train_accuracy')


def train_step(iterator):
  """Training step function."""
  def step_fn(inputs):
    """Per-Replica step function."""
    x, y = inputs
    predictions = multi_worker_model(x)
    per_example_loss = distrib.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=distrib.losses.Reduction.NONE)(y, predictions)
    loss = distrib.nn.compute_average_loss(per_example_loss)
    model_losses = multi_worker_model.losses
    if model_losses:
      loss += distrib.nn.scale_regularization_loss(torch.stack(model_losses).sum())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    train_accuracy.update_state(y, predictions.detach())
    return loss.detach()

  per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
  return strategy.reduce(distrib.ReduceOp.SUM, per_replica_losses, axis=None)


epoch = distrib.train.Variable(0, dtype=torch.int64, name='epoch')
step_in_epoch = distrib.train.Variable(0, dtype=torch.int64, name='step_in_epoch')
checkpoint_dir = os.environ.get(
    'MNIST_CKPT_DIR', os.path.join(tempfile.gettempdir(), 'distrib_mnist_ctl', 'ckpt'))

checkpoint = distrib.train.Checkpoint(
    model=multi_worker_model, epoch=epoch, step_in_epoch=step_in_epoch)
checkpoint_manager = distrib.train.CheckpointManager(
    checkpoint, directory=checkpoint_dir, max_to_keep=1)

# Restoring the checkpoint
latest_checkpoint = distrib.train.latest_checkpoint(checkpoint_dir)
if latest_checkpoint:
  checkpoint.restore(latest_checkpoint)

# Resume our CTL training
while epoch.numpy() < num_epochs:
  iterator = iter(multi_worker_dataset)
  total_loss = 0.0
  num_batches = 0
  while step_in_epoch.numpy() < num_steps_per_epoch:
    total_loss += train_step(iterator)
    num_batches += 1
    step_in_epoch.assign_add(1)
  train_loss = total_loss / num_batches
  accuracy = train_accuracy.result()
  if strategy.is_chief:
    print('Epoch: %d, accuracy: %f, train_loss: %f.'
          % (epoch.numpy(), accuracy, train_loss))
  train_accuracy.reset_states()
  epoch.assign_add(1)
  step_in_epoch.assign(0)
  # Every worker saves; only the chief's files land in checkpoint_dir. (The tutorial saves
  # before advancing the counters, so a restore re-enters a finished epoch with zero
  # steps and divides by zero; saving after them resumes at the next epoch.)
  checkpoint_manager.save()
