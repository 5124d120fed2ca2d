"""A parameter-server custom loop in which nothing travels as a pickle (registered functions).

Every task runs this same script. The functions the workers run are
registered above ``ParameterServerStrategy()``, so each worker has them too:
it never leaves the strategy's constructor, but it ran everything above it.
With ``DISTRIB_PS_FUNCTIONS=registered`` on every task, the chief sends their
names, the arguments in the closed encoding, and the model as the registered
call that built it; a worker refuses any pickle (docs/parameter-server.md).

Run:    DISTRIB_PS_FUNCTIONS=registered distrib launch --chief --workers 2 --ps 1 examples/ps_registered.py [STEPS]
"""
import sys

import torch

import distrib
from distrib.coordinator import ClusterCoordinator, remote_function

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 60


@remote_function
def build_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def make_data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, 3, generator=g)
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3


def dataset_fn(input_context):   # called by the worker's own code below: it need not be registered
    dataset = distrib.data.Dataset.from_tensor_slices(make_data()).shard(
        input_context.num_input_pipelines, input_context.input_pipeline_id)
    return dataset.shuffle(512, seed=2).repeat().batch(input_context.get_per_replica_batch_size(32))


@remote_function
def per_worker_dataset_fn():
    # On a worker the script's `strategy` is not set (it never left the constructor): ask for it.
    return distrib.get_strategy().distribute_datasets_from_function(dataset_fn)


@remote_function
def train_step(model, optimizer, iterator, loss_metric):
    x, y = next(iterator)
    loss = ((model(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    loss_metric.update_state(loss.detach())
    return loss.detach()


strategy = distrib.experimental.ParameterServerStrategy()   # workers and ps tasks serve here

# From here on only the chief (the coordinator) runs.
with strategy.scope():
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_metric = distrib.metrics.Mean()
x, y = make_data()
with torch.no_grad():
    before = float(((model(x) - y) ** 2).mean())          # the chief's copy: the initial variables
coordinator = ClusterCoordinator(strategy)
iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))
losses = [coordinator.schedule(train_step, args=(model, optimizer, iterator, loss_metric)) for _ in range(STEPS)]
coordinator.join()
print(f"loss {before:.4f} before, {float(losses[-1].fetch()):.4f} after {STEPS} steps "
      f"(mean {float(loss_metric.result()):.4f})")
