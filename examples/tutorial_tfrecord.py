"""TF tutorial "TFRecord and tf.train.Example", ported to distrib.io / distrib.data, then trained on.

    python examples/tutorial_tfrecord.py                           # one process
    distrib launch --workers 2 examples/tutorial_tfrecord.py       # 2 workers (MultiWorkerMirroredStrategy)

The tutorial's steps, in its order: ``tf.train.Feature`` helpers, an observation
of four features serialized as a ``tf.train.Example``, a TFRecord file of
observations written with ``TFRecordWriter``, read back with
``TFRecordDataset`` and parsed with ``parse_single_example``; then the image
walkthrough (Examples holding JPEG bytes and their shape, written, read,
parsed, decoded with ``decode_jpeg``). The tutorial stops at reading; this port
goes on to what the records are for: ``fit`` a small classifier reading the
TFRecord file through the pipeline, under a strategy, with
``BackupAndRestore`` when ``--backup-dir`` is given.

Differences from the TF original, forced by the environment:

* No downloads: the cat and bridge photos are smooth synthetic colour fields,
  JPEG-encoded with `distrib.io.encode_jpeg` (quality 95).
* The observations are drawn after ``np.random.seed(--seed)`` so that a run
  can be compared with TensorFlow's (``tests/tf_reference/tutorial_tfrecord_tf.py``),
  and ``--observations`` (the tutorial's 10,000 by default) sets their number.
* ``--initial-weights-seed`` starts the model from the weights TensorFlow's
  run starts from (`distrib.testing.seeded_weights`); ``--record`` writes what
  the run parsed and logged as JSON, ``--final-weights`` each worker's weights.
* Under ``distrib launch`` every worker writes its own copy of the files (in
  ``<out-dir>/worker-<i>``): the same bytes, and no worker reads a file another
  is still writing.
"""
import argparse
import json
import os

import numpy as np
import torch

import distrib
from distrib.testing.seeded_weights import seeded_weights


# The following functions can be used to convert a value to a type compatible with tf.train.Example.
def _bytes_feature(value):
  """Returns a bytes_list from a string / byte."""
  return distrib.io.Feature(bytes_list=distrib.io.BytesList(value=[value]))


def _float_feature(value):
  """Returns a float_list from a float / double."""
  return distrib.io.Feature(float_list=distrib.io.FloatList(value=[value]))


def _int64_feature(value):
  """Returns an int64_list from a bool / enum / int / uint."""
  return distrib.io.Feature(int64_list=distrib.io.Int64List(value=[int(value)]))


def serialize_example(feature0, feature1, feature2, feature3):
  """Creates a tf.train.Example-compatible message ready to be written to a file."""
  # Create a dictionary mapping the feature name to the compatible data type.
  feature = {
      'feature0': _int64_feature(feature0),
      'feature1': _int64_feature(feature1),
      'feature2': _bytes_feature(feature2),
      'feature3': _float_feature(feature3),
  }
  # Create a Features message using tf.train.Example.
  example_proto = distrib.io.Example(features=distrib.io.Features(feature=feature))
  return example_proto.SerializeToString()


feature_description = {
    'feature0': distrib.io.FixedLenFeature([], torch.int64, default_value=0),
    'feature1': distrib.io.FixedLenFeature([], torch.int64, default_value=0),
    'feature2': distrib.io.FixedLenFeature([], distrib.io.STRING, default_value=b''),
    'feature3': distrib.io.FixedLenFeature([], torch.float32, default_value=0.0),
}


def _parse_function(example_proto):
  # Parse the input `tf.train.Example` proto using the dictionary above.
  return distrib.io.parse_single_example(example_proto, feature_description)


def synthetic_images(seed):
  """Stand-ins for the tutorial's downloaded cat and bridge photos (uint8 HWC)."""
  rng = np.random.default_rng(seed)
  images = {}
  for name, (h, w) in (("cat", (36, 48)), ("bridge", (30, 40))):
    y, x = np.mgrid[0:h, 0:w]
    phase = rng.uniform(0, 6.28, 3)
    image = np.stack([127.5 + 120 * np.sin(x / 7 + y / 11 + p) for p in phase], axis=-1)
    images[name] = np.clip(np.round(image), 0, 255).astype(np.uint8)
  return images


# Create a dictionary with features that may be relevant.
def image_example(image_string, label):
  image_shape = distrib.io.decode_jpeg(image_string).shape

  feature = {
      'height': _int64_feature(image_shape[0]),
      'width': _int64_feature(image_shape[1]),
      'depth': _int64_feature(image_shape[2]),
      'label': _int64_feature(label),
      'image_raw': _bytes_feature(image_string),
  }
  return distrib.io.Example(features=distrib.io.Features(feature=feature))


image_feature_description = {
    'height': distrib.io.FixedLenFeature([], torch.int64),
    'width': distrib.io.FixedLenFeature([], torch.int64),
    'depth': distrib.io.FixedLenFeature([], torch.int64),
    'label': distrib.io.FixedLenFeature([], torch.int64),
    'image_raw': distrib.io.FixedLenFeature([], distrib.io.STRING),
}


def _parse_image_function(example_proto):
  # Parse the input tf.train.Example proto using the dictionary above.
  return distrib.io.parse_single_example(example_proto, image_feature_description)


def to_xy(e):
  """Training pairs: predict feature1 (5 classes) from the observation's features."""
  x = torch.stack([e['feature0'].to(torch.float32), e['feature1'].to(torch.float32) / 4.0, e['feature3']])
  return x, e['feature1']


def plain(value):
  if isinstance(value, bytes):
    return value.decode('utf-8')
  return value.tolist()


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out-dir', default='tfrecord_tutorial')
  parser.add_argument('--observations', type=int, default=10000)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--image-seed', type=int, default=3)
  parser.add_argument('--epochs', type=int, default=2)
  parser.add_argument('--batch-size', type=int, default=16, help='global batch size')
  parser.add_argument('--learning-rate', type=float, default=0.1)
  parser.add_argument('--initial-weights-seed', type=int, default=None)
  parser.add_argument('--backup-dir', default=None)
  parser.add_argument('--save-freq', type=int, default=3)
  parser.add_argument('--record', default=None, help='write what was parsed and logged to this JSON file')
  parser.add_argument('--final-weights', default=None, help='directory for each worker\'s final weights')
  args = parser.parse_args(argv)
  torch.set_num_threads(1)

  strategy = distrib.MultiWorkerMirroredStrategy()   # one worker without TF_CONFIG
  resolver = strategy.cluster_resolver
  workers = strategy.num_replicas_in_sync
  out_dir = args.out_dir if workers == 1 else os.path.join(args.out_dir, f'worker-{resolver.task_id}')
  os.makedirs(out_dir, exist_ok=True)

  # The number of observations in the dataset.
  n_observations = args.observations
  np.random.seed(args.seed)
  # Boolean feature, encoded as False or True.
  feature0 = np.random.choice([False, True], n_observations)
  # Integer feature, random from 0 to 4.
  feature1 = np.random.randint(0, 5, n_observations)
  # String feature.
  strings = np.array([b'cat', b'dog', b'chicken', b'horse', b'goat'])
  feature2 = strings[feature1]
  # Float feature, from a standard normal distribution.
  feature3 = np.random.randn(n_observations)

  serialized_example = serialize_example(False, 4, b'goat', 0.9876)
  example_proto = distrib.io.Example.FromString(serialized_example)
  print(example_proto)

  # Write the `tf.train.Example` observations to the file.
  filename = os.path.join(out_dir, 'test.tfrecord')
  with distrib.io.TFRecordWriter(filename) as writer:
    for i in range(n_observations):
      example = serialize_example(feature0[i], feature1[i], feature2[i], feature3[i])
      writer.write(example)

  filenames = [filename]
  raw_dataset = distrib.data.TFRecordDataset(filenames)
  for raw_record in raw_dataset.take(1):
    print(repr(raw_record[:40]))

  parsed_dataset = raw_dataset.map(_parse_function)
  for parsed_record in parsed_dataset.take(2):
    print(repr(parsed_record))

  # Walkthrough: reading and writing image data
  image_labels = {}
  for label, (name, image) in enumerate(synthetic_images(args.image_seed).items()):
    path = os.path.join(out_dir, f'{name}.jpg')
    distrib.io.write_file(path, distrib.io.encode_jpeg(image, quality=95))
    image_labels[path] = label

  record_file = os.path.join(out_dir, 'images.tfrecords')
  with distrib.io.TFRecordWriter(record_file) as writer:
    for filename_, label in image_labels.items():
      image_string = open(filename_, 'rb').read()
      tf_example = image_example(image_string, label)
      writer.write(tf_example.SerializeToString())

  parsed_image_dataset = distrib.data.TFRecordDataset(record_file).map(_parse_image_function)
  parsed_images = []
  for image_features in parsed_image_dataset:
    pixels = distrib.io.decode_jpeg(image_features['image_raw'])
    print('image', [int(image_features[k]) for k in ('height', 'width', 'depth', 'label')], tuple(pixels.shape))
    parsed_images.append({k: int(image_features[k]) for k in ('height', 'width', 'depth', 'label')})

  # Beyond the tutorial: train on the parsed records, under the strategy.
  train = parsed_dataset.map(to_xy).batch(args.batch_size)
  with strategy.scope():
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5)))
    if args.initial_weights_seed is not None:
      seeded_weights(model.module, args.initial_weights_seed)
    model.compile(optimizer=distrib.optimizers.SGD(args.learning_rate),
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
  batch_losses = []
  callbacks = []
  if args.record:   # every batch's logged loss (Keras's running mean), for the comparison with TF
    model.log_every = 1
    callbacks.append(distrib.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: batch_losses.append(float(logs['loss']))))
  if args.backup_dir:
    callbacks.append(distrib.callbacks.BackupAndRestore(args.backup_dir, save_freq=args.save_freq))
  history = model.fit(train, epochs=args.epochs, callbacks=callbacks, verbose=0)
  print('epoch losses:', [round(v, 6) for v in history.history['loss']])

  if args.final_weights:
    os.makedirs(args.final_weights, exist_ok=True)
    distrib.checkpoint.save_state(model.module.state_dict(),
                                  os.path.join(args.final_weights, f'final-{strategy.replica_id}.safetensors'))
  if args.record:
    with open(args.record, 'w') as f:
      json.dump({'parsed': [{k: plain(v) for k, v in e.items()} for e in parsed_dataset],
                 'images': parsed_images, 'batch_losses': batch_losses,
                 'epoch_losses': history.history['loss']}, f)


if __name__ == '__main__':
  main()
