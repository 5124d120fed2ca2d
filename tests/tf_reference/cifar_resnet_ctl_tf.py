"""``examples/cifar_resnet_ctl.py``'s program on TensorFlow, for the port's comparison.

Run by ``generate_round_three.py`` with the TensorFlow virtual environment:
the Model Garden's CIFAR input pipeline (augmentation off: TF's random
stream is its own), the ResNet stem in Keras 3, the custom loop of TF's
"Custom training with tf.distribute.Strategy", from the port's seeded
kernels, the data in order. Prints ``RESULT {"devices", "epochs"}``, each
epoch's ``[loss, accuracy, test_loss, test_accuracy]``::

    python cifar_resnet_ctl_tf.py MODE SETTINGS_JSON
"""
import json
import sys

import keras
import numpy as np
import tensorflow as tf

from tutorial_common_tf import _seeded_module, emit, strategy as make_strategy

HEIGHT, WIDTH, NUM_CHANNELS, NUM_CLASSES = 32, 32, 3, 10
BATCH_NORM_DECAY, BATCH_NORM_EPSILON, L2_WEIGHT_DECAY = 0.997, 1e-5, 2e-4
GLOBAL_BATCH_SIZE = 32


def cifar_like(n, seed):
    tint = np.random.default_rng(0).integers(-60, 61, (NUM_CLASSES, 1, 1, NUM_CHANNELS))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, n)
    images = rng.integers(40, 216, (n, HEIGHT, WIDTH, NUM_CHANNELS)) + tint[labels]
    return images.clip(0, 255).astype(np.uint8), labels.astype(np.int64)


def preprocess_image(image, is_training):
    if is_training:
        image = tf.image.resize_with_crop_or_pad(image, HEIGHT + 8, WIDTH + 8)
        image = tf.image.random_crop(image, [HEIGHT, WIDTH, NUM_CHANNELS])
        image = tf.image.random_flip_left_right(image)
    image = tf.image.per_image_standardization(image)
    return image


def input_fn(is_training, images, labels, batch_size, input_context=None):
    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    if input_context:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    dataset = dataset.cache()
    dataset = dataset.map(lambda image, label: (tf.cast(preprocess_image(image, False), tf.float32), label),
                          num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.batch(batch_size, drop_remainder=is_training)
    return dataset.prefetch(buffer_size=tf.data.AUTOTUNE)


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
    chosen = [w for w in model.weights if w.path.endswith(("kernel", "fc10/bias"))]
    for w, value in zip(chosen, _seeded_module().seeded_arrays([tuple(w.shape) for w in chosen], seed)):
        w.assign(value)


def main(mode, settings):
    strategy = make_strategy(mode)
    train_images, train_labels = cifar_like(settings["examples"], seed=1)
    test_images, test_labels = cifar_like(settings["examples"] // 4, seed=2)
    train_dataset = strategy.distribute_datasets_from_function(
        lambda ctx: input_fn(True, train_images, train_labels, ctx.get_per_replica_batch_size(GLOBAL_BATCH_SIZE),
                             input_context=ctx))
    test_dataset = strategy.experimental_distribute_dataset(
        input_fn(False, test_images, test_labels, GLOBAL_BATCH_SIZE))

    with strategy.scope():
        model = resnet(NUM_CLASSES)
        seed_kernels(model, settings["weights_seed"])
        optimizer = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
        loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        test_loss = keras.metrics.Mean(name="test_loss")
        test_accuracy = keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")

    def compute_loss(labels, predictions, model_losses):
        loss = tf.nn.compute_average_loss(loss_object(labels, predictions))
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = compute_loss(labels, predictions, model.losses)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        train_accuracy.update_state(labels, predictions)
        return loss

    def test_step(inputs):
        images, labels = inputs
        predictions = model(images, training=False)
        test_loss.update_state(loss_object(labels, predictions))
        test_accuracy.update_state(labels, predictions)

    @tf.function
    def distributed_train_step(dataset_inputs):
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    @tf.function
    def distributed_test_step(dataset_inputs):
        return strategy.run(test_step, args=(dataset_inputs,))

    epochs = []
    for _ in range(settings["epochs"]):
        total_loss, num_batches = 0.0, 0
        for x in train_dataset:
            total_loss += float(distributed_train_step(x))
            num_batches += 1
        for x in test_dataset:
            distributed_test_step(x)
        epochs.append([total_loss / num_batches, float(train_accuracy.result()) * 100,
                       float(test_loss.result()), float(test_accuracy.result()) * 100])
        test_loss.reset_state()
        train_accuracy.reset_state()
        test_accuracy.reset_state()
    emit({"devices": strategy.num_replicas_in_sync, "epochs": epochs})


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
