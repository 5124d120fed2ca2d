"""TF's "Custom training with tf.distribute.Strategy" tutorial on TensorFlow (run by generate_tutorials.py).

The tutorial's program, with what the comparison with
``examples/tutorial_custom_training.py`` needs: the MNIST subset of the
port's test (``DATA``, written by the generator), no shuffle (the port's
``--shuffle-buffer 1``), the port's seeded initial weights
(``--initial-weights-seed``) and the port's sizes. Prints ``RESULT {...}``
with every number the tutorial prints::

    python tutorial_custom_training_tf.py MODE DATA.npz SETTINGS_JSON
"""
import json
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

from tutorial_common_tf import emit, mnist, set_seeded_weights, strategy as make_strategy

LAYOUTS = ["conv", "same", "conv", "same", ("dense_after", (64, 5, 5)), "same", "dense", "same"]


def main(mode, data, settings):
    strategy = make_strategy(mode)
    (train_images, train_labels), (test_images, test_labels) = mnist(data)
    train_images = train_images[..., None] / np.float32(255)
    test_images = test_images[..., None] / np.float32(255)

    BATCH_SIZE_PER_REPLICA = settings["batch_size_per_replica"]
    GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
    EPOCHS = settings["epochs"]

    train_dataset = tf.data.Dataset.from_tensor_slices((train_images, train_labels)).shuffle(1).batch(
        GLOBAL_BATCH_SIZE)
    test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(GLOBAL_BATCH_SIZE)
    train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
    test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)

    def create_model():
        regularizer = tf.keras.regularizers.L2(1e-5)
        model = tf.keras.Sequential([
            tf.keras.layers.Input((28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation='relu', kernel_regularizer=regularizer),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(64, 3, activation='relu', kernel_regularizer=regularizer),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation='relu', kernel_regularizer=regularizer),
            tf.keras.layers.Dense(10, kernel_regularizer=regularizer)])
        return model

    checkpoint_dir = tempfile.mkdtemp()
    checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")

    with strategy.scope():
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

        def compute_loss(labels, predictions, model_losses):
            per_example_loss = loss_object(labels, predictions)
            loss = tf.nn.compute_average_loss(per_example_loss)
            if model_losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
            return loss

        test_loss = tf.keras.metrics.Mean(name='test_loss')
        train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='train_accuracy')
        test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='test_accuracy')

        model = create_model()
        set_seeded_weights(model, settings["initial_weights_seed"], LAYOUTS)
        optimizer = tf.keras.optimizers.Adam(learning_rate=0.001)
        optimizer.build(model.trainable_variables)
        checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model)

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
        t_loss = loss_object(labels, predictions)
        test_loss.update_state(t_loss)
        test_accuracy.update_state(labels, predictions)

    @tf.function
    def distributed_train_step(dataset_inputs):
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    @tf.function
    def distributed_test_step(dataset_inputs):
        return strategy.run(test_step, args=(dataset_inputs,))

    out = {"epochs": [], "alternate": []}
    for epoch in range(EPOCHS):
        total_loss = 0.0
        num_batches = 0
        for x in train_dist_dataset:
            total_loss += distributed_train_step(x)
            num_batches += 1
        train_loss = total_loss / num_batches
        for x in test_dist_dataset:
            distributed_test_step(x)
        if epoch % 2 == 0:
            checkpoint.save(checkpoint_prefix)
        out["epochs"].append([epoch + 1, float(train_loss), float(train_accuracy.result() * 100),
                              float(test_loss.result()), float(test_accuracy.result() * 100)])
        test_loss.reset_state()
        train_accuracy.reset_state()
        test_accuracy.reset_state()

    eval_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='eval_accuracy')
    new_model = create_model()
    new_optimizer = tf.keras.optimizers.Adam()
    test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(GLOBAL_BATCH_SIZE)

    @tf.function
    def eval_step(images, labels):
        predictions = new_model(images, training=False)
        eval_accuracy(labels, predictions)

    checkpoint = tf.train.Checkpoint(optimizer=new_optimizer, model=new_model)
    checkpoint.restore(tf.train.latest_checkpoint(checkpoint_dir)).expect_partial()
    for images, labels in test_dataset:
        eval_step(images, labels)
    out["restored"] = [float(eval_accuracy.result() * 100)]

    for epoch in range(EPOCHS):
        total_loss = 0.0
        num_batches = 0
        train_iter = iter(train_dist_dataset)
        for _ in range(10):
            total_loss += distributed_train_step(next(train_iter))
            num_batches += 1
        average_train_loss = total_loss / num_batches
        out["alternate"].append([epoch + 1, float(average_train_loss), float(train_accuracy.result() * 100)])
        train_accuracy.reset_state()

    @tf.function
    def distributed_train_epoch(dataset):
        total_loss = 0.0
        num_batches = 0
        for x in dataset:
            per_replica_losses = strategy.run(train_step, args=(x,))
            total_loss += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)
            num_batches += 1
        return total_loss / tf.cast(num_batches, dtype=tf.float32)

    for epoch in range(EPOCHS):
        train_loss = distributed_train_epoch(train_dist_dataset)
        out["alternate"].append([epoch + 1, float(train_loss), float(train_accuracy.result() * 100)])
        train_accuracy.reset_state()

    out["devices"] = [str(strategy.num_replicas_in_sync)]
    emit(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
