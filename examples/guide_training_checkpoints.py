"""TensorFlow's guide "Training checkpoints", ported: tf.train.Checkpoint, CheckpointManager, load_checkpoint.

The guide trains a `Dense(5)` on a toy dataset with a custom loop, saving
every 10 steps with a `CheckpointManager` (``max_to_keep=3``) that also tracks
the data iterator; a second run builds a new model, restores the latest
checkpoint and goes on; finally `load_checkpoint` reads the variables back.
Ported line for line: the layer is `torch.nn.Linear(1, 5)` (its ``weight`` is
Keras's kernel transposed), ``tf.GradientTape`` is ``loss.backward()``, the
loss is the same mean absolute error, the optimizer
`distrib.optimizers.Adam(0.1)` with ``apply_gradients``.

Run: ``python examples/guide_training_checkpoints.py [checkpoint_dir]``
(default ``./tf_ckpts``). The last line is ``RESULT {json}`` (the loss at each
save, what the second run restored, the checkpoints kept, the kernel read
back), compared with TensorFlow's by ``tests/unit/test_guide_training_checkpoints.py``.
``INITIAL_KERNEL`` fixes the layer's first values, as the TF script does.
"""
import json
import os
import sys

import torch

import distrib

INITIAL_KERNEL = [[0.3, -0.2, 0.1, 0.5, -0.4]]
CKPT_DIR = sys.argv[1] if len(sys.argv) > 1 else "./tf_ckpts"


class Net(torch.nn.Module):
    """A simple linear model."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(1, 5)

    def forward(self, x):
        return self.l1(x)


def toy_dataset():
    inputs = torch.arange(10.)[:, None]
    labels = inputs * 5. + torch.arange(5.)[None, :]
    return distrib.data.Dataset.from_tensor_slices(dict(x=inputs, y=labels)).repeat().batch(2)


def train_step(net, example, optimizer):
    """Trains `net` on `example` using `optimizer`."""
    output = net(example['x'])
    loss = torch.mean(torch.abs(output - example['y']))
    variables = list(net.parameters())
    gradients = torch.autograd.grad(loss, variables)
    optimizer.apply_gradients(zip(gradients, variables))
    return loss


def build():
    net = Net()
    with torch.no_grad():
        net.l1.weight.copy_(torch.tensor(INITIAL_KERNEL).T)
        net.l1.bias.zero_()
    opt = distrib.optimizers.Adam(0.1)
    opt.build(net.parameters())  # torch's optimizer holds its slots from the start (TF creates them lazily)
    dataset = toy_dataset()
    iterator = iter(dataset)
    ckpt = distrib.train.Checkpoint(step=distrib.train.Variable(1), optimizer=opt, net=net, iterator=iterator)
    manager = distrib.train.CheckpointManager(ckpt, CKPT_DIR, max_to_keep=3)
    return net, opt, iterator, ckpt, manager


def train_and_checkpoint(net, opt, iterator, ckpt, manager, record):
    ckpt.restore(manager.latest_checkpoint)
    if manager.latest_checkpoint:
        print("Restored from {}".format(manager.latest_checkpoint))
        record["restored"].append(os.path.basename(manager.latest_checkpoint))
    else:
        print("Initializing from scratch.")
        record["restored"].append(None)

    for _ in range(50):
        example = next(iterator)
        loss = train_step(net, example, opt)
        ckpt.step.assign_add(1)
        if int(ckpt.step) % 10 == 0:
            save_path = manager.save()
            print("Saved checkpoint for step {}: {}".format(int(ckpt.step), save_path))
            print("loss {:1.2f}".format(loss.item()))
            record["saves"].append([int(ckpt.step), os.path.basename(save_path), float(loss.item())])


def main():
    record = {"restored": [], "saves": []}
    train_and_checkpoint(*build(), record)
    net, opt, iterator, ckpt, manager = build()   # the guide's second run: a new model, restored
    train_and_checkpoint(net, opt, iterator, ckpt, manager, record)
    record["checkpoints"] = [os.path.basename(p) for p in manager.checkpoints]
    reader = distrib.train.load_checkpoint(CKPT_DIR)
    shape_from_key = reader.get_variable_to_shape_map()
    record["kernel_shape"] = shape_from_key["net/l1.weight"][::-1]   # Keras's kernel is torch's weight, transposed
    record["bias_shape"] = shape_from_key["net/l1.bias"]
    record["kernel"] = reader.get_tensor("net/l1.weight").T.tolist()
    print("RESULT " + json.dumps(record))


if __name__ == "__main__":
    main()
