"""The guide's ``ParameterServerStrategy`` with Keras ``Model.fit`` (the parameter-server tutorial's fit section), ported.

TensorFlow's distributed training guide creates the strategy and its coordinator from
``TF_CONFIG`` with a ``variable_partitioner`` and lists ``Model.fit`` under
``ParameterServerStrategy``; the tutorial it points to trains a one-``Dense``
model with ``Model.fit`` on a ``DatasetCreator``, with TensorBoard,
ModelCheckpoint and BackupAndRestore callbacks. Every task runs this script:
on the ps and worker tasks the strategy's constructor serves until the chief's
program ends, then exits; the chief (the coordinator) runs the rest.

Run:    distrib launch --chief --workers 2 --ps 2 examples/guide_ps_fit.py

Environment: ``PS_FIT_DIR`` (working directory, default
``<tmp>/distrib_guide_ps_fit``), ``PS_FIT_EPOCHS`` (5), ``PS_FIT_STEPS`` (20).
What differs from TensorFlow: no in-process cluster (``distrib launch`` starts
the tasks), the model is a ``torch.nn.Module`` (``LazyLinear(10)`` for
``Dense(10)``, which infers its input size).
"""
import os
import tempfile

import torch

import distrib

NUM_PS = 2
working_dir = os.environ.get("PS_FIT_DIR", os.path.join(tempfile.gettempdir(), "distrib_guide_ps_fit"))
epochs = int(os.environ.get("PS_FIT_EPOCHS", 5))
steps_per_epoch = int(os.environ.get("PS_FIT_STEPS", 20))

# The guide's snippet: the strategy, its variable partitioner, and the coordinator.
variable_partitioner = (
    distrib.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=(256 << 10),
        max_shards=NUM_PS))

strategy = distrib.experimental.ParameterServerStrategy(
    distrib.cluster.TFConfigClusterResolver(),
    variable_partitioner=variable_partitioner)
coordinator = distrib.coordinator.ClusterCoordinator(
    strategy)

# From here on only the chief (the coordinator) runs.


def dataset_fn(input_context):
  global_batch_size = 64
  batch_size = input_context.get_per_replica_batch_size(global_batch_size)

  x = torch.rand((10, 10))
  y = torch.rand((10, 10))      # TF: (10,), which Keras broadcasts against the (batch, 10) output

  dataset = distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(10).repeat()
  dataset = dataset.shard(
      input_context.num_input_pipelines,
      input_context.input_pipeline_id)
  dataset = dataset.batch(batch_size)
  dataset = dataset.prefetch(2)

  return dataset


dc = distrib.data.experimental.DatasetCreator(dataset_fn)

with strategy.scope():
  model = distrib.Model(torch.nn.Sequential(torch.nn.LazyLinear(10)))   # tf.keras.layers.Dense(10)

  model.compile(distrib.optimizers.SGD(), loss="mse", steps_per_execution=10)

log_dir = os.path.join(working_dir, "log")
ckpt_filepath = os.path.join(working_dir, "ckpt")
backup_dir = os.path.join(working_dir, "backup")

callbacks = [
    distrib.callbacks.TensorBoard(log_dir=log_dir),
    distrib.callbacks.ModelCheckpoint(filepath=ckpt_filepath),
    distrib.callbacks.BackupAndRestore(backup_dir=backup_dir),
]

history = model.fit(dc, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks)
print("Loss per epoch:", " ".join("{:.6f}".format(v) for v in history.history["loss"]))
