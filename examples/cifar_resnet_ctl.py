"""A CIFAR-10 ResNet custom training loop as TensorFlow's public programs write it, ported.

Sources, all public: the input pipeline is TensorFlow Model Garden's
``official/legacy/image_classification/resnet/cifar_preprocessing.py``
(``preprocess_image``: pad to 40x40, random 32x32 crop, random left-right
flip, per-image standardization; ``input_fn`` sharded by the
``InputContext``, ``cache``, ``map`` with ``AUTOTUNE``, ``prefetch``); the
network is the stem and first identity block of the Model Garden's
``resnet_cifar_model.py`` (``he_normal`` kernels with
``l2(L2_WEIGHT_DECAY)`` regularizers, ``BatchNormalization(momentum=0.997,
epsilon=1e-5)``), written with Keras 3 layers; the loop is the TF tutorial
"Custom training with tf.distribute.Strategy" (``compute_average_loss`` plus
``scale_regularization_loss`` of ``model.losses``, ``strategy.run``,
``strategy.reduce``):

    python examples/cifar_resnet_ctl.py                                    # 1 replica
    DISTRIB_LOCAL_DEVICES=cpu:0,cpu:1 python examples/cifar_resnet_ctl.py  # 2 CPU replicas
    distrib launch --workers 2 examples/cifar_resnet_ctl.py                # 2 launched replicas

How each Keras feature ports (issue 39): the model *is* Keras 3 (torch
backend): ``kernel_regularizer``/``keras.regularizers.l2`` and the
``model.losses`` list they feed, ``he_normal`` (a truncated normal) and
``BatchNormalization``'s arguments are Keras's own; a Keras model is a
``torch.nn.Module``, so the loop is plain PyTorch. Images stay
channels-last, as Keras's ``Conv2D`` wants them. With several replicas
Keras's ``BatchNormalization`` normalises with the *global* batch's
statistics (TF's ``MirroredStrategy`` uses each replica's own; pass
``CommunicationOptions(sync_batch_norm=False)`` to the strategy for TF's).

Differences from the originals, forced by the environment or by PyTorch:

* Data: CIFAR-10 cannot be downloaded here; ``cifar_like`` draws 32x32x3
  uint8 images whose class shows in their colours (NumPy, seeded).
  ``TUTORIAL_EXAMPLES``/``TUTORIAL_EPOCHS`` size the run.
* The random crop and flip draw distrib's keyed numbers (`distrib.image`):
  not TensorFlow's stream, but the same for every example on any number of
  replicas. ``TUTORIAL_AUGMENT=0`` leaves them out (the comparison with
  TensorFlow's numbers, ``tests/tf_reference/cifar_resnet_ctl_tf.py``).
* ``TUTORIAL_BUFFER_SIZE`` (default 10000, the Model Garden's shuffle
  buffer) and ``TUTORIAL_WEIGHTS_SEED`` (seeded kernels, as TensorFlow's run
  sets them) serve the comparison too.
* The optimizer is ``torch.optim.SGD(lr=0.1, momentum=0.9)``: Keras's
  ``SGD(0.1, momentum=0.9)`` step at a constant learning rate.
"""
import os

os.environ.setdefault("KERAS_BACKEND", "torch")  # Keras 3 on PyTorch, before keras is imported

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import distrib  # noqa: E402
from distrib.testing.seeded_weights import seeded_arrays  # noqa: E402

HEIGHT, WIDTH, NUM_CHANNELS, NUM_CLASSES = 32, 32, 3, 10
BATCH_NORM_DECAY, BATCH_NORM_EPSILON, L2_WEIGHT_DECAY = 0.997, 1e-5, 2e-4  # resnet_cifar_model.py
EXAMPLES = int(os.environ.get("TUTORIAL_EXAMPLES", 2048))
EPOCHS = int(os.environ.get("TUTORIAL_EPOCHS", 3))
AUGMENT = os.environ.get("TUTORIAL_AUGMENT", "1") != "0"
BUFFER_SIZE = int(os.environ.get("TUTORIAL_BUFFER_SIZE", 10000))
WEIGHTS_SEED = os.environ.get("TUTORIAL_WEIGHTS_SEED")
GLOBAL_BATCH_SIZE = 32


def cifar_like(n, seed):
    """``n`` CIFAR-shaped uint8 images and int64 labels; each class tints the image its own way."""
    tint = np.random.default_rng(0).integers(-60, 61, (NUM_CLASSES, 1, 1, NUM_CHANNELS))   # one per class
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, n)
    images = rng.integers(40, 216, (n, HEIGHT, WIDTH, NUM_CHANNELS)) + tint[labels]
    return images.clip(0, 255).astype(np.uint8), labels.astype(np.int64)


train_images, train_labels = cifar_like(EXAMPLES, seed=1)
test_images, test_labels = cifar_like(EXAMPLES // 4, seed=2)

devices = os.environ.get("DISTRIB_LOCAL_DEVICES")
strategy = distrib.MirroredStrategy(devices.split(",") if devices else None)


def say(*args):
    if strategy.is_chief:
        print(*args, flush=True)


# ---- cifar_preprocessing.py
def preprocess_image(image, is_training):
    """Preprocess a single image of layout [height, width, depth]."""
    if is_training:
        # Resize the image to add four extra pixels on each side.
        image = distrib.image.resize_with_crop_or_pad(image, HEIGHT + 8, WIDTH + 8)
        # Randomly crop a [HEIGHT, WIDTH] section of the image.
        image = distrib.image.random_crop(image, [HEIGHT, WIDTH, NUM_CHANNELS])
        # Randomly flip the image horizontally.
        image = distrib.image.random_flip_left_right(image)
    # Subtract off the mean and divide by the variance of the pixels.
    image = distrib.image.per_image_standardization(image)
    return image


def parse_record(image, label, is_training, dtype):
    """The Model Garden decodes CIFAR's binary records here; our records are arrays already."""
    image = preprocess_image(image, is_training and AUGMENT)
    return image.to(dtype), label


def input_fn(is_training, images, labels, batch_size, dtype=torch.float32, input_context=None):
    dataset = distrib.data.Dataset.from_tensor_slices((images, labels))
    if input_context:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    dataset = dataset.cache()
    if is_training:
        dataset = dataset.shuffle(buffer_size=BUFFER_SIZE)
    dataset = dataset.map(lambda image, label: parse_record(image, label, is_training, dtype),
                          num_parallel_calls=distrib.data.AUTOTUNE)
    dataset = dataset.batch(batch_size, drop_remainder=is_training)
    return dataset.prefetch(buffer_size=distrib.data.AUTOTUNE)


# ---- resnet_cifar_model.py: the stem and one identity block
def conv(filters, name):
    return keras.layers.Conv2D(filters, 3, padding="same", use_bias=False, kernel_initializer="he_normal",
                               kernel_regularizer=keras.regularizers.l2(L2_WEIGHT_DECAY), name=name)


def batch_norm(name):
    return keras.layers.BatchNormalization(axis=3, momentum=BATCH_NORM_DECAY, epsilon=BATCH_NORM_EPSILON,
                                           name=name)


def resnet(num_classes):
    inputs = keras.Input((HEIGHT, WIDTH, NUM_CHANNELS))
    x = keras.layers.Activation("relu")(batch_norm("bn_conv1")(conv(16, "conv1")(inputs)))
    y = keras.layers.Activation("relu")(batch_norm("bn2a_branch2a")(conv(16, "res2a_branch2a")(x)))
    y = batch_norm("bn2a_branch2b")(conv(16, "res2a_branch2b")(y))
    x = keras.layers.Activation("relu")(keras.layers.add([y, x]))
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes, kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
                                 kernel_regularizer=keras.regularizers.l2(L2_WEIGHT_DECAY),
                                 bias_regularizer=keras.regularizers.l2(L2_WEIGHT_DECAY), name="fc10")(x)
    return keras.Model(inputs, outputs, name="resnet")


def seed_kernels(model, seed):
    """Kernels and the classifier's bias from NumPy (TensorFlow's run does the same), BatchNorm as built."""
    chosen = [w for w in model.weights if w.path.endswith(("kernel", "fc10/bias"))]
    for w, value in zip(chosen, seeded_arrays([tuple(w.shape) for w in chosen], seed)):
        w.assign(value)


# ---- the custom loop (TF's "Custom training with tf.distribute.Strategy")
train_dataset = strategy.distribute_datasets_from_function(
    lambda ctx: input_fn(True, train_images, train_labels, ctx.get_per_replica_batch_size(GLOBAL_BATCH_SIZE),
                         input_context=ctx))
test_dataset = strategy.experimental_distribute_dataset(
    input_fn(False, test_images, test_labels, GLOBAL_BATCH_SIZE))

with strategy.scope():
    keras.utils.set_random_seed(0)
    model = resnet(NUM_CLASSES)
    if WEIGHTS_SEED:
        seed_kernels(model, int(WEIGHTS_SEED))
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1, momentum=0.9)
    loss_object = distrib.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=distrib.losses.Reduction.NONE)
    train_accuracy = distrib.metrics.SparseCategoricalAccuracy(name="train_accuracy")
    test_loss = distrib.metrics.Mean(name="test_loss")
    test_accuracy = distrib.metrics.SparseCategoricalAccuracy(name="test_accuracy")


def compute_loss(labels, predictions, model_losses):
    per_example_loss = loss_object(labels, predictions)
    loss = distrib.nn.compute_average_loss(per_example_loss)
    if model_losses:
        loss += distrib.nn.scale_regularization_loss(torch.stack(model_losses).sum())   # tf.add_n(model_losses)
    return loss


def train_step(inputs):
    images, labels = inputs
    predictions = model(images, training=True)
    loss = compute_loss(labels, predictions, model.losses)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    train_accuracy.update_state(labels, predictions.detach())
    return loss.detach()


def test_step(inputs):
    images, labels = inputs
    with torch.no_grad():
        predictions = model(images, training=False)
        test_loss.update_state(loss_object(labels, predictions))
        test_accuracy.update_state(labels, predictions)


def distributed_train_step(dataset_inputs):
    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
    return strategy.reduce(distrib.ReduceOp.SUM, per_replica_losses, axis=None)


def distributed_test_step(dataset_inputs):
    return strategy.run(test_step, args=(dataset_inputs,))


say(f"replicas: {strategy.num_replicas_in_sync}; augmentation: {'on' if AUGMENT else 'off'}; "
    f"regularization terms: {len(model.losses)}")
for epoch in range(EPOCHS):
    total_loss, num_batches = 0.0, 0
    for x in train_dataset:
        total_loss += float(distributed_train_step(x))
        num_batches += 1
    train_loss = total_loss / num_batches
    for x in test_dataset:
        distributed_test_step(x)
    say(f"Epoch {epoch + 1}, Loss: {train_loss:.6f}, Accuracy: {float(train_accuracy.result()) * 100:.4f}, "
        f"Test Loss: {float(test_loss.result()):.6f}, Test Accuracy: {float(test_accuracy.result()) * 100:.4f}")
    test_loss.reset_state()
    train_accuracy.reset_state()
    test_accuracy.reset_state()
