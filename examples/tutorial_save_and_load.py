"""TF tutorial "Save and load a model using a distribution strategy", ported line for line.

    python examples/tutorial_save_and_load.py                                   # MirroredStrategy, 1 replica
    DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1 python examples/tutorial_save_and_load.py # 2 CPU replicas
    distrib launch --workers 2 examples/tutorial_save_and_load.py               # 2 launched replicas

Differences from the TF original, all forced by the environment or by PyTorch:

* Data: ``tfds.load('mnist')`` cannot download here; the images come from
  `distrib.datasets.mnist.load_data()` (offline MNIST-shaped digits; set
  ``DISTRIB_MNIST`` to a real ``mnist.npz`` for MNIST itself), in PyTorch's
  channels-first layout ``(1, 28, 28)``. ``TUTORIAL_EXAMPLES`` /
  ``TUTORIAL_EPOCHS`` / ``TUTORIAL_DIR`` shorten the run and choose where
  files go (tests use them).
* ``tf.distribute.MirroredStrategy()`` takes every GPU; on a CPU-only machine
  ``DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1`` gives it two CPU replicas.
* The model is a ``torch.nn.Sequential`` of standard layers, so
  `distrib.models.load_model` rebuilds it without the training code.
* ``tf.saved_model.save`` reads the input shape from the Keras model; a
  torch module does not know its input shape, so the export is given an
  ``input_signature`` (the batch dimension ``None``: any size).
* The ``hub.KerasLayer`` section is left out (TensorFlow Hub).
* Code outside every scope (``load_model`` then ``fit``, the subclassed
  model's ``compile``/``fit``/``save``) runs on the default strategy, as in
  TF; with 2 CPU replicas or under ``distrib launch`` the program runs in 2
  replica processes, and that code trains identically in both while files
  and output come from replica 0 (`distrib.strategies.local_replicas.replica_process`).
* A torch module becomes a Keras-style model by wrapping it:
  ``distrib.Model(module)``.
* For the number-by-number comparison with TensorFlow's run
  (``tests/tf_reference/tutorial_save_and_load_tf.py``):
  ``TUTORIAL_BUFFER_SIZE=1`` keeps the data in order, ``TUTORIAL_WEIGHTS_SEED``
  starts every model from the seeded weights TensorFlow's run starts from
  (`distrib.testing.seeded_weights`).
"""
import os

import numpy as np
import torch

import distrib
from distrib.testing.seeded_weights import seeded_weights_from_env

OUT = os.environ.get("TUTORIAL_DIR", "/tmp")
EXAMPLES = int(os.environ.get("TUTORIAL_EXAMPLES", 60000))
EPOCHS = int(os.environ.get("TUTORIAL_EPOCHS", 2))

devices = os.environ.get("DISTRIB_LOCAL_DEVICES")
mirrored_strategy = distrib.MirroredStrategy(devices.split(",") if devices else None)


def say(*args):
  if mirrored_strategy.is_chief:
    print(*args, flush=True)


def get_data():
  (x_train, y_train), (x_test, y_test) = distrib.datasets.mnist.load_data()
  mnist_train = distrib.data.Dataset.from_tensor_slices((x_train[:EXAMPLES, None], y_train[:EXAMPLES]))
  mnist_test = distrib.data.Dataset.from_tensor_slices((x_test[:EXAMPLES, None], y_test[:EXAMPLES]))

  BUFFER_SIZE = int(os.environ.get("TUTORIAL_BUFFER_SIZE", 10000))

  BATCH_SIZE_PER_REPLICA = 64
  BATCH_SIZE = BATCH_SIZE_PER_REPLICA * mirrored_strategy.num_replicas_in_sync

  def scale(image, label):
    image = image.to(torch.float32)            # tf.cast(image, tf.float32)
    image /= 255

    return image, label

  train_dataset = mnist_train.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)
  eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE)

  return train_dataset, eval_dataset


def get_model():
  with mirrored_strategy.scope():
    model = distrib.Model(torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(),    # Conv2D(32, 3, activation='relu', input_shape=(28, 28, 1))
        torch.nn.MaxPool2d(2),                         # MaxPooling2D()
        torch.nn.Flatten(),                            # Flatten()
        torch.nn.Linear(32 * 13 * 13, 64), torch.nn.ReLU(),  # Dense(64, activation='relu')
        torch.nn.Linear(64, 10)))                      # Dense(10)
    seeded_weights_from_env(model)                     # tests only: TensorFlow's initial weights

    model.compile(loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=distrib.optimizers.Adam(),
                  metrics=[distrib.metrics.SparseCategoricalAccuracy()])
    return model


torch.manual_seed(0)
model = get_model()
train_dataset, eval_dataset = get_data()
model.fit(train_dataset, epochs=EPOCHS)

# ------------------------------------------------------------------ The Keras API
keras_model_path = os.path.join(OUT, 'keras_save.keras')
model.save(keras_model_path)

# Restore the model without tf.distribute.Strategy:
restored_keras_model = distrib.models.load_model(keras_model_path)
eval_batch = next(iter(eval_dataset.map(lambda image, label: image)))
say("restored predictions match:",
    bool(np.allclose(restored_keras_model.predict(eval_batch, verbose=0), model.predict(eval_batch, verbose=0),
                     atol=1e-5)))
restored_keras_model.fit(train_dataset, epochs=EPOCHS)   # outside any scope: the default strategy

# Restore the model under another strategy:
another_strategy = distrib.OneDeviceStrategy('/cpu:0')
with another_strategy.scope():
  restored_keras_model_ds = distrib.models.load_model(keras_model_path)
  restored_keras_model_ds.fit(train_dataset, epochs=EPOCHS)

# ------------------------------------------------------- The tf.saved_model API
model = get_model()  # get a fresh model
saved_model_path = os.path.join(OUT, 'tf_save')
distrib.saved_model.save(model, saved_model_path,
                         input_signature=[distrib.TensorSpec(shape=(None, 1, 28, 28), dtype=torch.float32)])

DEFAULT_FUNCTION_KEY = 'serving_default'
loaded = distrib.saved_model.load(saved_model_path)
inference_func = loaded.signatures[DEFAULT_FUNCTION_KEY]

predict_dataset = eval_dataset.map(lambda image, label: image)

# Load the saved model and run inference on a batch of the evaluation data:
for batch in predict_dataset.take(1):
  result = inference_func(batch)
  say(result)
  say("exported predictions match:",
      bool(np.allclose(result['output_0'].numpy(), model.predict(batch, verbose=0), atol=1e-5)))

# (distrib addition) the exported function alone, over the whole evaluation set:
correct = total = 0
for images, labels in eval_dataset:
  correct += int((inference_func(images)['output_0'].argmax(1) == labels).sum())
  total += len(labels)
say(f"exported accuracy: {correct / total:.4f}")

# Load and do inference in a distributed manner:
another_strategy = distrib.MirroredStrategy(devices.split(",") if devices else None)
with another_strategy.scope():
  loaded = distrib.saved_model.load(saved_model_path)
  inference_func = loaded.signatures[DEFAULT_FUNCTION_KEY]

  dist_predict_dataset = another_strategy.experimental_distribute_dataset(predict_dataset)

  # Calling the function in a distributed manner
  for batch in dist_predict_dataset:
    result = another_strategy.run(inference_func, args=(batch,))
    say("distributed inference outputs per replica:",
        [tuple(r['output_0'].shape) for r in another_strategy.experimental_local_results(result)])
    break

# ------------------------------------------------------------------ Caveats
# A model whose inputs are not known (TF: a subclassed model never called) cannot be exported without a signature.
class SubclassedModel(torch.nn.Module):

  output_name = 'output_layer'

  def __init__(self):
    super(SubclassedModel, self).__init__()
    self._dense_layer = torch.nn.Linear(5, 5)

  def forward(self, inputs):
    return self._dense_layer(inputs)


my_model = SubclassedModel()
seeded_weights_from_env(my_model)                      # tests only: TensorFlow's initial weights
try:
  distrib.saved_model.save(my_model, os.path.join(OUT, 'subclassed'))
except distrib.saved_model.ExportError as e:
  say("Export without a signature failed:", e)

distrib.saved_model.save(my_model, os.path.join(OUT, 'subclassed'),
                         input_signature=[distrib.TensorSpec(shape=(None, 5), dtype=torch.float32)])
x = distrib.saved_model.load(os.path.join(OUT, 'subclassed'))
say("subclassed signatures:", list(x.signatures))

# A subclassed model built and trained outside any scope (TF: on the default strategy), then saved:
BATCH_SIZE_PER_REPLICA = 4
BATCH_SIZE = BATCH_SIZE_PER_REPLICA * mirrored_strategy.num_replicas_in_sync

dataset_size = 100
dataset = distrib.data.Dataset.from_tensors(
    (torch.arange(5, dtype=torch.float32), torch.arange(5, dtype=torch.float32))
).repeat(dataset_size).batch(BATCH_SIZE)

my_model = distrib.Model(my_model)
my_model.compile(optimizer='adam', loss='mean_squared_error')
history = my_model.fit(dataset, epochs=2)
say("subclassed fit losses:", [round(v, 4) for v in history.history['loss']])
my_model.save(os.path.join(OUT, 'subclassed.keras'))
say("subclassed model saved:", os.path.isdir(os.path.join(OUT, 'subclassed.keras')))
