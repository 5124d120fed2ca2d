"""TensorFlow's guide "Migrate multi-worker CPU/GPU training", its TensorFlow 2 part, ported.

The guide trains a one-``Dense`` model on three examples with Keras
``Model.fit`` (a plain repeated dataset, ``steps_per_epoch``) and then
``Model.evaluate(..., steps=10, return_dict=True)`` under a
``ParameterServerStrategy`` on an in-process cluster (a chief, 3 workers, 2
ps), and says a ``MultiWorkerMirroredStrategy`` made without ``TF_CONFIG`` can
replace it (it then trains locally): this port runs the same training with
both strategies, one after the other. The guide's TensorFlow 1 part
(``tf.estimator``) has no distrib counterpart.

Run it two ways:
    python examples/migrate_multi_worker.py                          # in-process cluster
    distrib launch --chief --workers 3 --ps 2 examples/migrate_multi_worker.py

What differs from TensorFlow: ports picked and ``tf.distribute.Server``
started one by one become `distrib.testing.create_in_process_cluster` (child
processes, not threads; under ``distrib launch`` every task runs this script
and the worker and ps tasks serve inside the strategy's constructor);
``tf.keras.optimizers.legacy.Adagrad`` (Keras 2) is ``distrib.optimizers.Adagrad``
(Keras 3's); ``Dense(1)`` is ``LazyLinear(1)``.

Tests only: ``MIGRATE_WORKERS`` (3), ``MIGRATE_BUFFER_SIZE`` (the shuffle
buffer, 10; 1 keeps the data in order) and ``TUTORIAL_WEIGHTS_SEED`` (both
models start from the seeded weights TensorFlow's run starts from).
"""
import json
import os

import torch

import distrib
from distrib.testing.seeded_weights import seeded_weights_from_env

NUM_WORKERS = int(os.environ.get("MIGRATE_WORKERS", 3))
BUFFER_SIZE = int(os.environ.get("MIGRATE_BUFFER_SIZE", 10))

# ---------------------------------------------------------------- Setup
features = [[1., 1.5], [2., 2.5], [3., 3.5]]
labels = [[0.3], [0.5], [0.7]]
eval_features = [[4., 4.5], [5., 5.5], [6., 6.5]]
eval_labels = [[0.8], [0.9], [1.]]

# ---------------------------------------------------------------- TensorFlow 2: ParameterServerStrategy
# The guide picks free ports, writes them to TF_CONFIG and starts a tf.distribute.Server
# per worker and ps in the notebook; here the tasks are child processes (or distrib launch's).
if "TF_CONFIG" in os.environ:
  cluster_resolver = distrib.cluster.TFConfigClusterResolver()
else:
  cluster_resolver = distrib.testing.create_in_process_cluster(NUM_WORKERS, 2)

strategy = distrib.experimental.ParameterServerStrategy(cluster_resolver)
# From here on only the chief (the coordinator) runs.


def train_and_evaluate(strategy):
  """The guide's training cell and its evaluation cell, under ``strategy``."""
  dataset = distrib.data.Dataset.from_tensor_slices(
        (features, labels)).shuffle(BUFFER_SIZE).repeat().batch(64)
  eval_dataset = distrib.data.Dataset.from_tensor_slices(
        (eval_features, eval_labels)).repeat().batch(1)

  with strategy.scope():
    model = distrib.Model(torch.nn.Sequential(torch.nn.LazyLinear(1)))   # tf.keras.layers.Dense(1)
    if os.environ.get("TUTORIAL_WEIGHTS_SEED"):  # tests only: built for 2 features, TensorFlow's weights
      model(torch.zeros(1, 2))
      seeded_weights_from_env(model)
    optimizer = distrib.optimizers.Adagrad(learning_rate=0.05)   # Keras 2: optimizers.legacy.Adagrad
    model.compile(optimizer, "mse")

  history = model.fit(dataset, epochs=5, steps_per_epoch=10)
  result = model.evaluate(eval_dataset, steps=10, return_dict=True)
  return history.history["loss"], result


ps_losses, ps_result = train_and_evaluate(strategy)
print("ParameterServerStrategy losses: %s" % json.dumps(ps_losses))
print("ParameterServerStrategy evaluate: %s" % json.dumps(ps_result))

# ---------------------------------------------------------------- Alternatively: MultiWorkerMirroredStrategy
# To clean up the `TF_CONFIG` used for `ParameterServerStrategy` (the guide: `del os.environ['TF_CONFIG']`;
# with an in-process cluster there is none). Without it the strategy trains locally.
os.environ.pop("TF_CONFIG", None)
strategy = distrib.MultiWorkerMirroredStrategy()

mwms_losses, mwms_result = train_and_evaluate(strategy)
print("MultiWorkerMirroredStrategy losses: %s" % json.dumps(mwms_losses))
print("MultiWorkerMirroredStrategy evaluate: %s" % json.dumps(mwms_result))
