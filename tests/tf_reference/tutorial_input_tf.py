"""TF's "Distributed input" tutorial cells whose printed values distrib's port compares, run on TensorFlow.

Run by `generate_tutorials.py` with the TensorFlow virtual environment (never
distrib's); prints the same ``key: value`` lines as
``examples/tutorial_distributed_input.py`` (values as Python literals):

    python tutorial_input_tf.py 1     # MirroredStrategy on one CPU
    python tutorial_input_tf.py 2     # MirroredStrategy on 2 virtual CPUs
    TF_CONFIG=... python tutorial_input_tf.py workers   # MultiWorkerMirroredStrategy
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf


def shapes(value):
    if isinstance(value, (tuple, list)):
        return type(value)(shapes(v) for v in value)
    return tuple(int(d) for d in value.shape)


def local(strategy, value):
    return strategy.experimental_local_results(value)


def main(mode):
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if mode == "workers":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        n = int(mode)
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
        strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)])
    out = {"num_replicas_in_sync": [strategy.num_replicas_in_sync]}

    def emit(key, value):
        out.setdefault(key, []).append(value)

    dataset = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(100).batch(16)
    emit("first batch", shapes(local(strategy, next(iter(strategy.experimental_distribute_dataset(dataset))))))

    dist_dataset = strategy.experimental_distribute_dataset(dataset)
    losses = 0
    for x in dist_dataset:
        strategy.run(lambda inputs: inputs[1] - 0.3 * inputs[0], args=(x,))
        losses += 1
    for _ in range(10):
        it = iter(dist_dataset)
        for _ in range(5):
            strategy.run(lambda inputs: inputs[1] - 0.3 * inputs[0], args=(next(it),))
            losses += 1
    out["Loss is"] = [losses]

    distributed_iterator = iter(strategy.experimental_distribute_dataset(tf.data.Dataset.range(9).batch(4)))
    for _ in range(5):
        optional_data = distributed_iterator.get_next_as_optional()
        if not optional_data.has_value():
            break
        results = strategy.run(lambda x: x, args=(optional_data.get_value(),))
        emit("optional", [t.numpy().tolist() for t in local(strategy, results)])

    with strategy.scope():
        layer = tf.keras.layers.StringLookup(vocabulary=["a", "b", "c", "d", "f"])

    def dataset_fn(input_context):
        ds = tf.data.Dataset.from_tensor_slices(["a", "c", "e"]).repeat()
        ds = ds.batch(input_context.get_per_replica_batch_size(4))
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.map(lambda x: layer(x))

    it = iter(strategy.distribute_datasets_from_function(dataset_fn))
    for _ in range(3):
        emit("lookup", [t.numpy().tolist() for t in local(strategy, next(it))])

    dataset = tf.data.Dataset.range(24).enumerate().batch(6)
    result = {}
    for index, inputs in strategy.experimental_distribute_dataset(dataset):
        output_index, outputs = strategy.run(lambda i, x: (i, 2 * x), args=(index, inputs))
        for i, v in zip(np.concatenate([a.numpy() for a in local(strategy, output_index)]),
                        np.concatenate([a.numpy() for a in local(strategy, outputs)])):
            result[int(i)] = int(v)
    emit("predict with index", result)

    values = strategy.experimental_distribute_values_from_function(lambda ctx: ctx.replica_id_in_sync_group)
    for _ in range(4):
        emit("values", [int(t) for t in local(strategy, strategy.run(lambda x: x, args=(values,)))])

    def input_gen():
        while True:
            yield np.random.rand(4)

    dataset = tf.data.Dataset.from_generator(input_gen, output_types=tf.float32, output_shapes=tf.TensorShape([4]))
    it = iter(strategy.experimental_distribute_dataset(dataset))
    for _ in range(4):
        emit("generator", shapes(local(strategy, strategy.run(lambda x: x, args=(next(it),)))))
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
