"""TF guide "Migrate single-worker multiple-GPU training" (TensorFlow 2 section), ported line for line.

https://www.tensorflow.org/guide/migrate/mirrored_strategy — a one-``Dense``
model trained with ``Model.fit`` under ``MirroredStrategy`` on three examples
batched one at a time, then evaluated:

    python examples/migrate_mirrored_strategy.py                                    # 1 replica
    DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1 python examples/migrate_mirrored_strategy.py  # 2 CPU replicas
    distrib launch --workers 2 examples/migrate_mirrored_strategy.py                # 2 launched replicas

With 2 replicas every global batch of one example leaves one replica with
nothing: its share of the loss is 0 and the logged loss is one process's
(issue 39). Differences from the TF original, forced by PyTorch:

* the model is ``torch.nn.Linear(2, 1)`` wrapped in `distrib.Model`
  (Keras's ``Dense(1)`` on 2 features);
* ``TUTORIAL_WEIGHTS_SEED`` starts it from the seeded weights TensorFlow's
  run (``tests/tf_reference/migrate_mirrored_tf.py``) starts from, for the
  number-by-number comparison in ``tests/distributed/test_round_three_ports.py``.
"""
import os

import torch

import distrib
from distrib.testing.seeded_weights import seeded_weights_from_env

features = [[1., 1.5], [2., 2.5], [3., 3.5]]
labels = [[0.3], [0.5], [0.7]]
eval_features = [[4., 4.5], [5., 5.5], [6., 6.5]]
eval_labels = [[0.8], [0.9], [1.]]

devices = os.environ.get("DISTRIB_LOCAL_DEVICES")
strategy = distrib.MirroredStrategy(devices.split(",") if devices else None)

dataset = distrib.data.Dataset.from_tensor_slices(
      (features, labels)).batch(1)
eval_dataset = distrib.data.Dataset.from_tensor_slices(
      (eval_features, eval_labels)).batch(1)

with strategy.scope():
  model = distrib.Model(seeded_weights_from_env(torch.nn.Linear(2, 1)))   # tf.keras.layers.Dense(1)
  optimizer = distrib.optimizers.Adagrad(learning_rate=0.05)
  model.compile(optimizer, "mse")

model.fit(dataset)
result = model.evaluate(eval_dataset, return_dict=True)
if strategy.is_chief:
  print(result)
