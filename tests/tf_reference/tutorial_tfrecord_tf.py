"""TF's "TFRecord and tf.train.Example" tutorial, run in TensorFlow 2.21, recorded for its port.

Run with the TensorFlow virtual environment (never distrib's):

    /work/tfvenv/bin/python tests/tf_reference/tutorial_tfrecord_tf.py

The tutorial's cells as TF runs them, with the port's sizes and seeds
(``examples/tutorial_tfrecord.py`` uses the same settings): ``np.random.seed``
before the observations, synthetic JPEG images instead of the downloaded cat
and bridge, and — the tutorial stops at reading — a small Keras model trained
on the parsed records with the port's seeded initial weights
(`distrib.testing.seeded_weights`), data in file order.

Writes ``tests/data/tf_reference/tutorial_tfrecord/`` (the ``test.tfrecord``
and ``images.tfrecords`` TF wrote) and ``tutorial_tfrecord.json``: the parsed
observations, the parsed image features and decoded pixels, and the logged
losses of every training batch (Keras's running mean) and epoch.
"""
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from tutorial_common_tf import set_seeded_weights  # noqa: E402

OUT = HERE.parent / "data" / "tf_reference"
FILES = OUT / "tutorial_tfrecord"
SETTINGS = {"observations": 120, "seed": 0, "batch_size": 16, "epochs": 2, "learning_rate": 0.1,
            "initial_weights_seed": 11, "image_seed": 3}


def _bytes_feature(value):
    if isinstance(value, type(tf.constant(0))):
        value = value.numpy()
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _float_feature(value):
    return tf.train.Feature(float_list=tf.train.FloatList(value=[value]))


def _int64_feature(value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))  # protobuf 7 refuses numpy.bool


def serialize_example(feature0, feature1, feature2, feature3):
    feature = {"feature0": _int64_feature(feature0), "feature1": _int64_feature(feature1),
               "feature2": _bytes_feature(feature2), "feature3": _float_feature(feature3)}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def synthetic_images(seed):
    """The stand-ins for the tutorial's downloaded cat and bridge: smooth colour fields (uint8 HWC)."""
    rng = np.random.default_rng(seed)
    images = {}
    for name, (h, w) in (("cat", (36, 48)), ("bridge", (30, 40))):
        y, x = np.mgrid[0:h, 0:w]
        phase = rng.uniform(0, 6.28, 3)
        image = np.stack([127.5 + 120 * np.sin(x / 7 + y / 11 + p) for p in phase], axis=-1)
        images[name] = np.clip(np.round(image), 0, 255).astype(np.uint8)
    return images


def plain(value):
    value = value.numpy() if hasattr(value, "numpy") else value
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return np.asarray(value).tolist()


def main():
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    shutil.rmtree(FILES, ignore_errors=True)
    FILES.mkdir(parents=True)
    n = SETTINGS["observations"]
    np.random.seed(SETTINGS["seed"])
    feature0 = np.random.choice([False, True], n)
    feature1 = np.random.randint(0, 5, n)
    strings = np.array([b"cat", b"dog", b"chicken", b"horse", b"goat"])
    feature2 = strings[feature1]
    feature3 = np.random.randn(n)

    filename = str(FILES / "test.tfrecord")
    with tf.io.TFRecordWriter(filename) as writer:
        for i in range(n):
            writer.write(serialize_example(feature0[i], feature1[i], feature2[i], feature3[i]))

    feature_description = {
        "feature0": tf.io.FixedLenFeature([], tf.int64, default_value=0),
        "feature1": tf.io.FixedLenFeature([], tf.int64, default_value=0),
        "feature2": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "feature3": tf.io.FixedLenFeature([], tf.float32, default_value=0.0),
    }

    def _parse_function(example_proto):
        return tf.io.parse_single_example(example_proto, feature_description)

    parsed_dataset = tf.data.TFRecordDataset([filename]).map(_parse_function)
    parsed = [{k: plain(v) for k, v in e.items()} for e in parsed_dataset]

    # Walkthrough: reading and writing image data
    images = synthetic_images(SETTINGS["image_seed"])
    image_labels = {}
    for label, name in enumerate(["cat", "bridge"]):
        path = FILES / f"{name}.jpg"
        path.write_bytes(tf.io.encode_jpeg(images[name], quality=95).numpy())
        image_labels[str(path)] = label

    def image_example(image_string, label):
        image_shape = tf.io.decode_jpeg(image_string).shape
        feature = {"height": _int64_feature(image_shape[0]), "width": _int64_feature(image_shape[1]),
                   "depth": _int64_feature(image_shape[2]), "label": _int64_feature(label),
                   "image_raw": _bytes_feature(image_string)}
        return tf.train.Example(features=tf.train.Features(feature=feature))

    record_file = str(FILES / "images.tfrecords")
    with tf.io.TFRecordWriter(record_file) as writer:
        for filename_, label in image_labels.items():
            image_string = open(filename_, "rb").read()
            writer.write(image_example(image_string, label).SerializeToString())

    image_feature_description = {
        "height": tf.io.FixedLenFeature([], tf.int64), "width": tf.io.FixedLenFeature([], tf.int64),
        "depth": tf.io.FixedLenFeature([], tf.int64), "label": tf.io.FixedLenFeature([], tf.int64),
        "image_raw": tf.io.FixedLenFeature([], tf.string),
    }
    parsed_images = []
    for features in tf.data.TFRecordDataset(record_file).map(
            lambda p: tf.io.parse_single_example(p, image_feature_description)):
        pixels = tf.io.decode_jpeg(features["image_raw"])
        parsed_images.append({k: plain(features[k]) for k in ("height", "width", "depth", "label")}
                             | {"pixels": pixels.numpy().reshape(-1).tolist()})

    # Training on the parsed records (beyond the tutorial): predict feature1 from the other features
    def to_xy(e):
        x = tf.stack([tf.cast(e["feature0"], tf.float32), tf.cast(e["feature1"], tf.float32) / 4.0,
                      e["feature3"]])
        return x, e["feature1"]

    train = parsed_dataset.map(to_xy).batch(SETTINGS["batch_size"])
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(5)])
    set_seeded_weights(model, SETTINGS["initial_weights_seed"], ["dense", "same", "dense", "same"])
    model.compile(optimizer=tf.keras.optimizers.SGD(SETTINGS["learning_rate"]),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    batch_losses = []
    record = tf.keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: batch_losses.append(float(logs["loss"])))
    history = model.fit(train, epochs=SETTINGS["epochs"], callbacks=[record], verbose=0, shuffle=False)

    result = {"settings": SETTINGS, "parsed": parsed, "images": parsed_images,
              "batch_losses": batch_losses, "epoch_losses": [float(v) for v in history.history["loss"]]}
    (OUT / "tutorial_tfrecord.json").write_text(json.dumps(result) + "\n")
    print({k: os.path.getsize(FILES / k) for k in os.listdir(FILES)}, result["epoch_losses"])


if __name__ == "__main__":
    main()
