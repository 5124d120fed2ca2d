"""The strategy guide's ``evaluator`` task, ported: training workers plus a side-car evaluator.

TensorFlow's distributed training guide lists ``"chief"``, ``"worker"``, ``"ps"`` and
``"evaluator"`` as the roles of ``TF_CONFIG``. Here every task runs this one
script: the workers train with a custom loop under MultiWorkerMirroredStrategy
and save a checkpoint per epoch with `CheckpointManager`; the ``evaluator``
task takes no part in training and evaluates each checkpoint as it appears.

Run on 2 workers and an evaluator:  distrib launch --workers 2 --evaluator examples/guide_sidecar_evaluator.py
Run alone (trains, no evaluator):   python examples/guide_sidecar_evaluator.py

Environment: ``SIDECAR_DIR`` (checkpoints in ``<dir>/ckpt``, evaluator logs in
``<dir>/logs/eval``; default ``<tmp>/distrib_guide_sidecar``, the same for
every task), ``SIDECAR_EPOCHS`` (3),
``SIDECAR_WEIGHTS`` (if set, the chief writes the final weights there as JSON).
"""
import json
import os
import tempfile

import torch

import distrib

EPOCHS = int(os.environ.get("SIDECAR_EPOCHS", 3))
STEPS_PER_EPOCH = 4
GLOBAL_BATCH = 16
work_dir = os.environ.get("SIDECAR_DIR", os.path.join(tempfile.gettempdir(), "distrib_guide_sidecar"))
checkpoint_dir = os.path.join(work_dir, "ckpt")
log_dir = os.path.join(work_dir, "logs")


def make_data(n=GLOBAL_BATCH * STEPS_PER_EPOCH, seed=0):
  g = torch.Generator().manual_seed(seed)
  x = torch.randn(n, 8, generator=g)
  y = (x[:, :4].sum(dim=1) > 0).long()
  return x, y


def build_module():
  torch.manual_seed(1)
  return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def train(strategy):
  """The workers' custom loop; returns the final weights."""
  x, y = make_data()
  with strategy.scope():
    model = build_module()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dataset = strategy.experimental_distribute_dataset(
        distrib.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat())
  loss_fn = distrib.losses.SparseCategoricalCrossentropy(
      from_logits=True, reduction=distrib.losses.Reduction.NONE)

  def step_fn(inputs):
    features, labels = inputs
    loss = distrib.nn.compute_average_loss(loss_fn(labels, model(features)))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()

  epoch = distrib.train.Variable(0, dtype=torch.int64, name="epoch")
  checkpoint = distrib.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch)
  manager = distrib.train.CheckpointManager(checkpoint, directory=checkpoint_dir, max_to_keep=None)
  manager.restore_or_initialize()
  iterator = iter(dataset)
  while int(epoch) < EPOCHS:
    for _ in range(STEPS_PER_EPOCH):
      strategy.run(step_fn, args=(next(iterator),))
    epoch.assign_add(1)
    manager.save()  # ckpt-<epoch>: what the evaluator watches for
  return [p.detach().tolist() for p in model.state_dict().values()]


def evaluate(strategy, callbacks=None):
  """The evaluator task: evaluate every checkpoint until the last epoch's."""
  x, y = make_data(seed=1)
  with strategy.scope():
    model = distrib.Model(build_module())
    model.compile(loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
  evaluator = distrib.SidecarEvaluator(
      model, distrib.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH),
      checkpoint_dir=checkpoint_dir, max_evaluations=EPOCHS, callbacks=callbacks,
      log_dir=log_dir, poll_interval=0.2)
  return evaluator.start()


def main(eval_callbacks=None):
  strategy = distrib.MultiWorkerMirroredStrategy()
  resolver = strategy.cluster_resolver
  if resolver.task_type == "evaluator":
    evaluate(strategy, callbacks=eval_callbacks)
    return
  weights = train(strategy)
  if resolver.is_chief and os.environ.get("SIDECAR_WEIGHTS"):
    with open(os.environ["SIDECAR_WEIGHTS"], "w", encoding="utf-8") as f:
      json.dump(weights, f)


if __name__ == "__main__":
  main()
