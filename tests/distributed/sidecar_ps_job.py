"""A parameter-server job whose chief saves a checkpoint per epoch, and its side-car evaluator.

Run: distrib launch --chief --workers 1 --ps 1 --evaluator tests/distributed/sidecar_ps_job.py
Environment: SIDECAR_DIR (checkpoints in <dir>/ckpt, evaluator state in <dir>/logs/eval).
"""
import os

import torch

import distrib

EPOCHS = 3
work_dir = os.environ["SIDECAR_DIR"]
checkpoint_dir = os.path.join(work_dir, "ckpt")
x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
y = (x.sum(dim=1) > 0).long()


def build():
  torch.manual_seed(0)
  return torch.nn.Linear(4, 2)


strategy = distrib.experimental.ParameterServerStrategy(distrib.cluster.TFConfigClusterResolver())
# ps and worker tasks serve inside the constructor; the chief and the evaluator go on.

if strategy.cluster_resolver.task_type == "evaluator":
  with strategy.scope():
    model = distrib.Model(build())
    model.compile(loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
  distrib.SidecarEvaluator(model, distrib.data.Dataset.from_tensor_slices((x, y)).batch(16),
                           checkpoint_dir=checkpoint_dir, max_evaluations=EPOCHS,
                           log_dir=os.path.join(work_dir, "logs"), poll_interval=0.2).start()
else:
  with strategy.scope():
    model = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
  loss_fn = distrib.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=distrib.losses.Reduction.NONE)

  def step_fn(iterator):
    def replica_fn(features, labels):
      loss = distrib.nn.compute_average_loss(loss_fn(labels, model(features)))
      optimizer.zero_grad()
      loss.backward()
      optimizer.step()
      return loss.detach()
    features, labels = next(iterator)
    return strategy.run(replica_fn, args=(features, labels))

  coordinator = distrib.coordinator.ClusterCoordinator(strategy)
  dataset = coordinator.create_per_worker_dataset(
      lambda: distrib.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat())
  iterator = iter(dataset)
  manager = distrib.train.CheckpointManager(distrib.train.Checkpoint(model=model), checkpoint_dir,
                                            max_to_keep=None)
  for _ in range(EPOCHS):
    for _ in range(4):
      coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()
    manager.save()
