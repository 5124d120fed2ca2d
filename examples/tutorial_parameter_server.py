"""TensorFlow's tutorial "Parameter server training with ParameterServerStrategy", ported.

Sections as in the tutorial: an in-process cluster, training with
``Model.fit`` (a ``DatasetCreator``, ``steps_per_execution``, callbacks),
then a custom training loop with a ``ClusterCoordinator`` and evaluation
(inline on the coordinator, and distributed to the workers).

Run it two ways:
    python examples/tutorial_parameter_server.py                           # in-process cluster
    distrib launch --chief --workers 2 --ps 2 examples/tutorial_parameter_server.py

With ``distrib launch`` (``TF_CONFIG`` is set) every task runs this script:
the worker and ps tasks serve inside the strategy's constructor and exit
there; the chief runs the rest. Without ``TF_CONFIG`` the script starts the
workers and ps tasks itself, as child processes, like the tutorial's
``create_in_process_cluster``.

String features: the tutorial's ``StringLookup`` layers map words to ids
inside the input pipeline. distrib's pipelines carry tensors, so the idiom
here is a Python dict looked up once, when the examples are turned into
tensors (``feature_ids[word]``); out-of-vocabulary words get id 0, as with
``StringLookup(num_oov_indices=1)``.

For the number-by-number comparison with TensorFlow's run
(``tests/tf_reference/tutorial_parameter_server_tf.py``, one worker):
``TUTORIAL_BUFFER_SIZE=1`` keeps every dataset in order and
``TUTORIAL_WEIGHTS_SEED`` starts both models from the seeded weights
TensorFlow's run starts from (`distrib.testing.seeded_weights`).
"""
import os
import random
import tempfile

import torch

import distrib
from distrib.testing.seeded_weights import seeded_weights_from_env

NUM_WORKERS = int(os.environ.get("TUTORIAL_PS_WORKERS", 3))
NUM_PS = 2
FIT_EPOCHS = int(os.environ.get("TUTORIAL_PS_FIT_EPOCHS", 5))
CTL_EPOCHS = int(os.environ.get("TUTORIAL_PS_CTL_EPOCHS", 4))


def buffer_size(tutorial_value):
  """The tutorial's shuffle buffer, or ``TUTORIAL_BUFFER_SIZE`` (tests: 1 keeps the data in order)."""
  return int(os.environ.get("TUTORIAL_BUFFER_SIZE", tutorial_value))

# ---------------------------------------------------------------- Set up the cluster
if "TF_CONFIG" in os.environ:
  cluster_resolver = distrib.cluster.TFConfigClusterResolver()
else:
  cluster_resolver = distrib.testing.create_in_process_cluster(NUM_WORKERS, NUM_PS)

# ---------------------------------------------------------------- Instantiate a ParameterServerStrategy
variable_partitioner = (
    distrib.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=(256 << 10),
        max_shards=NUM_PS))

strategy = distrib.experimental.ParameterServerStrategy(
    cluster_resolver,
    variable_partitioner=variable_partitioner)
# From here on only the chief (the coordinator) runs.

# ================================================================ Training with Model.fit
# Input data: a function of the InputContext, called on every worker.
def dataset_fn(input_context):
  global_batch_size = 64
  batch_size = input_context.get_per_replica_batch_size(global_batch_size)

  generator = torch.Generator().manual_seed(input_context.input_pipeline_id)
  x = torch.rand((10, 10), generator=generator)
  # As in the tutorial, y is one number per example: Model.fit's "mse" compares it with
  # each of the 10 outputs (targets (64,) are expanded to (64, 1), as tf.keras 2's fit did).
  y = torch.rand((10,), generator=generator)

  dataset = distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(buffer_size(10)).repeat()
  dataset = dataset.shard(
      input_context.num_input_pipelines,
      input_context.input_pipeline_id)
  dataset = dataset.batch(batch_size)
  dataset = dataset.prefetch(2)

  return dataset

dc = distrib.data.experimental.DatasetCreator(dataset_fn)

# Model construction and compiling. LazyLinear is Keras's Dense(10) without an
# input size: fit builds it from the first batch before the variables go to the ps tasks.
with strategy.scope():
  model = distrib.Model(torch.nn.Sequential(torch.nn.LazyLinear(10)))
  if os.environ.get("TUTORIAL_WEIGHTS_SEED"):  # tests only: built for 10 features, TensorFlow's initial weights
    model(torch.zeros(1, 10))
    seeded_weights_from_env(model)

  model.compile(distrib.optimizers.SGD(), loss="mse", steps_per_execution=10)

# Callbacks and training.
working_dir = tempfile.mkdtemp(prefix="my_working_dir")
log_dir = os.path.join(working_dir, "log")
ckpt_filepath = os.path.join(working_dir, "ckpt")
backup_dir = os.path.join(working_dir, "backup")

callbacks = [
    distrib.callbacks.TensorBoard(log_dir=log_dir),
    distrib.callbacks.BackupAndRestore(backup_dir=backup_dir),
]
if hasattr(distrib.callbacks, "ModelCheckpoint"):   # the tutorial's third callback, where available
  callbacks.append(distrib.callbacks.ModelCheckpoint(filepath=ckpt_filepath))

history = model.fit(dc, epochs=FIT_EPOCHS, steps_per_epoch=20, callbacks=callbacks)
print("Model.fit losses: %s" % ", ".join("%.4f" % v for v in history.history["loss"]))

# ================================================================ Training with a custom training loop
# Data setup: the tutorial's StringLookup layers, as dicts (see the docstring).
feature_vocab = [
    "avenger", "ironman", "batman", "hulk", "spiderman", "kingkong", "wonder_woman"
]
label_vocab = ["yes", "no"]

feature_ids = {word: i + 1 for i, word in enumerate(feature_vocab)}     # 0: out of vocabulary
label_ids = {word: i for i, word in enumerate(label_vocab)}             # no out-of-vocabulary id


def feature_and_label_gen(num_examples=200):
  examples = {"features": [], "label": []}
  for _ in range(num_examples):
    features = random.sample(feature_vocab, 3)
    label = ["yes"] if "avenger" in features else ["no"]
    examples["features"].append(features)
    examples["label"].append(label)
  return examples

random.seed(0)
examples = feature_and_label_gen()
feature_tensor = torch.tensor([[feature_ids.get(w, 0) for w in row] for row in examples["features"]])
label_tensor = torch.tensor([[label_ids[w] for w in row] for row in examples["label"]])


def dataset_fn(_):
  raw_dataset = distrib.data.Dataset.from_tensor_slices(
      {"features": feature_tensor, "label": label_tensor})

  train_dataset = raw_dataset.map(
      lambda x: ({"features": x["features"]}, x["label"])
  ).shuffle(buffer_size(200)).batch(32).repeat()
  return train_dataset


# Build the model.
class Model(torch.nn.Module):
  def __init__(self):
    super().__init__()
    self.emb_layer = torch.nn.Embedding(len(feature_vocab) + 1, 16384)
    self.dense = torch.nn.Linear(16384, 1)
    # Keras's initializers: uniform(-0.05, 0.05) embeddings, Glorot-uniform kernel, zero bias.
    torch.nn.init.uniform_(self.emb_layer.weight, -0.05, 0.05)
    torch.nn.init.xavier_uniform_(self.dense.weight)
    torch.nn.init.zeros_(self.dense.bias)

  def forward(self, inputs):
    emb_output = self.emb_layer(inputs["features"]).mean(dim=1)
    return torch.sigmoid(self.dense(emb_output))


with strategy.scope():
  model = seeded_weights_from_env(Model())   # (tests only: TensorFlow's initial weights)
  # Keras's RMSprop (rho=0.9, epsilon=1e-7 inside the square root). The tutorial's learning
  # rate 0.1 saturates this 16384-wide model under asynchronous updates; 0.001 trains as
  # the tutorial shows.
  optimizer = distrib.optimizers.KerasRMSprop(model.parameters(), lr=0.001)
  accuracy = distrib.metrics.Accuracy()

print(strategy.variable_placement(model.emb_layer.weight))   # the partitioner split it over the 2 ps


# Define the training step.
def step_fn(iterator):

  def replica_fn(batch_data, labels):
    pred = model(batch_data)
    per_example_loss = distrib.losses.BinaryCrossentropy(
        reduction=distrib.losses.Reduction.NONE)(labels, pred)
    loss = distrib.nn.compute_average_loss(per_example_loss)
    loss += distrib.nn.scale_regularization_loss(1e-4 * model.dense.weight.pow(2).sum())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    actual_pred = (pred > 0.5).long()
    accuracy.update_state(labels, actual_pred)
    return loss.detach()

  batch_data, labels = next(iterator)
  losses = strategy.run(replica_fn, args=(batch_data, labels))
  return strategy.reduce(distrib.ReduceOp.SUM, losses, axis=None)


# Dispatch training steps to remote workers.
coordinator = distrib.coordinator.ClusterCoordinator(strategy)


def per_worker_dataset_fn():
  return strategy.distribute_datasets_from_function(dataset_fn)

per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
per_worker_iterator = iter(per_worker_dataset)

num_epochs = CTL_EPOCHS
steps_per_epoch = 5
for i in range(num_epochs):
  accuracy.reset_states()
  for _ in range(steps_per_epoch):
    coordinator.schedule(step_fn, args=(per_worker_iterator,))
  # Wait at epoch boundaries.
  coordinator.join()
  print("Finished epoch %d, accuracy is %f." % (i, accuracy.result().numpy()))

loss = coordinator.schedule(step_fn, args=(per_worker_iterator,))
print("Final loss is %f" % loss.fetch())

# ================================================================ Evaluation
# Inline evaluation: the coordinator runs the model itself (it reads the variables from the ps).
eval_dataset = distrib.data.Dataset.from_tensor_slices(
    {"features": feature_tensor, "label": label_tensor}).map(
        lambda x: ({"features": x["features"]}, x["label"])).batch(8)

eval_accuracy = distrib.metrics.Accuracy()

with torch.no_grad():
  for batch_data, labels in eval_dataset:
    pred = model(batch_data)
    actual_pred = (pred > 0.5).long()
    eval_accuracy.update_state(labels, actual_pred)

print("Evaluation accuracy: %f" % eval_accuracy.result().numpy())

# Distributed evaluation: the workers evaluate, the coordinator adds up the metric.
with strategy.scope():
  # Define the eval metric on parameter servers.
  eval_accuracy = distrib.metrics.Accuracy()


def eval_step(iterator):

  def replica_fn(batch_data, labels):
    with torch.no_grad():
      pred = model(batch_data)
    actual_pred = (pred > 0.5).long()
    eval_accuracy.update_state(labels, actual_pred)

  batch_data, labels = next(iterator)
  strategy.run(replica_fn, args=(batch_data, labels))


def eval_dataset_fn(_):
  return distrib.data.Dataset.from_tensor_slices(
      {"features": feature_tensor, "label": label_tensor}).map(
          lambda x: ({"features": x["features"]}, x["label"])).shuffle(buffer_size(16)).repeat().batch(8)

per_worker_eval_dataset = coordinator.create_per_worker_dataset(
    lambda: strategy.distribute_datasets_from_function(eval_dataset_fn))
per_worker_eval_iterator = iter(per_worker_eval_dataset)

eval_steps_per_epoch = 2
for _ in range(eval_steps_per_epoch):
  coordinator.schedule(eval_step, args=(per_worker_eval_iterator,))
coordinator.join()
print("Evaluation accuracy: %f" % eval_accuracy.result().numpy())
