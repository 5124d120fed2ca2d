"""No host read inside a training step: losses and metrics stay on the device until logs are asked for.

`distrib.testing.host_reads.HostReads` records every call that would hand a
device value to the host (``.item()``, ``float(t)``, ``bool(t)``, ``.cpu()``,
``.tolist()``...), whatever device the tensors are on, so these CPU tests fail
on a read that would stall a GPU. A recording callback opens a counter at each
``on_train_batch_begin`` and closes it at ``on_train_batch_end``; with
``log_every`` beyond the epoch no step in between computes logs.
"""
from __future__ import annotations

import pytest
import torch

import distrib
from distrib.testing.host_reads import HostReads


class _CountSteps(distrib.callbacks.Callback):
    """Records the host reads of each batch between its begin and end hooks (last batch excluded: it logs)."""

    def __init__(self, phase: str = "train") -> None:
        super().__init__()
        self.reads = []
        self._open = None
        setattr(self, f"on_{phase}_batch_begin", self._begin)
        setattr(self, f"on_{phase}_batch_end", self._end)

    def _begin(self, batch, logs=None):
        self._open = HostReads()
        self._open.__enter__()

    def _end(self, batch, logs=None):
        self._open.__exit__(None, None, None)
        self.reads.append(self._open.sites())


def _data(n=192):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=gen)
    return x, x[:, :3].argmax(1)


def _model(strategy, metrics, optimizer="adam"):
    with strategy.scope():
        model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)))
        model.compile(optimizer=optimizer, metrics=metrics,
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.log_every = 10_000
    return model


STRATEGIES = {"default": distrib.get_strategy, "one_device": lambda: distrib.OneDeviceStrategy("cpu")}
METRICS = {
    "none": None,
    "accuracy": ["accuracy"],
    "several": ["sparse_categorical_accuracy", distrib.metrics.SparseTopKCategoricalAccuracy(k=2),
                distrib.metrics.SparseCategoricalCrossentropy(from_logits=True)],
}


@pytest.mark.parametrize("metrics", sorted(METRICS))
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_a_fit_step_reads_nothing_on_the_host(strategy, metrics):
    x, y = _data()
    model = _model(STRATEGIES[strategy](), METRICS[metrics])
    counter = _CountSteps()
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[counter])
    # the first step may build metrics; the last of each epoch computes its logs
    steps = [reads for index, reads in enumerate(counter.reads) if index not in (0, 5, 11)]
    assert len(steps) == 9
    assert [s for s in steps if s] == []


def test_class_weight_on_arrays_is_checked_once_not_read_each_step():
    x, y = _data()
    model = _model(distrib.get_strategy(), None)
    counter = _CountSteps()
    with HostReads() as whole:
        model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[counter], class_weight={0: 1.0, 1: 2.0, 2: 0.5})
    steps = [reads for index, reads in enumerate(counter.reads) if index not in (0, 5, 11)]
    assert [s for s in steps if s] == []
    # the labels are checked once, over the whole array, before the first step (their largest and smallest)
    assert len([site for site in whole.sites() if "data_adapter" in site]) == 2


def test_class_weight_without_a_weight_for_a_label_is_one_clear_error_before_training():
    x, y = _data()
    model = _model(distrib.get_strategy(), None)
    before = [p.detach().clone() for p in model.module.parameters()]
    with pytest.raises(ValueError, match="class_weight has no weight for class 2"):
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, class_weight={0: 1.0, 1: 2.0})
    assert all(torch.equal(a, b) for a, b in zip(before, model.module.parameters()))


@pytest.mark.parametrize("optimizer", ["sgd", "rmsprop", "adamw", "lion"])
def test_the_keras_optimizers_read_nothing_on_the_host_in_a_step(optimizer):
    x, y = _data()
    model = _model(distrib.get_strategy(), ["accuracy"], optimizer)
    counter = _CountSteps()
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[counter])
    assert [s for s in counter.reads[1:-1] if s] == []


def test_with_steps_per_execution_and_under_a_mixed_bfloat16_policy_too():
    x, y = _data()
    distrib.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = _model(distrib.get_strategy(), ["accuracy"])
        model.steps_per_execution = 2
        counter = _CountSteps()
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[counter])
    finally:
        distrib.mixed_precision.set_global_policy("float32")
    assert len(counter.reads) == 3
    assert [s for s in counter.reads[1:-1] if s] == []


def test_an_evaluate_step_reads_nothing_on_the_host():
    x, y = _data()
    model = _model(distrib.get_strategy(), ["accuracy"])
    counter = _CountSteps("test")
    model.evaluate(x, y, batch_size=32, verbose=0, callbacks=[counter])
    assert [s for s in counter.reads[1:-1] if s] == []


def test_strategy_run_of_a_custom_step_reads_nothing_on_the_host():
    strategy = distrib.OneDeviceStrategy("cpu")
    x, y = _data()
    with strategy.scope():
        net = torch.nn.Linear(8, 3)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
    batches = iter(strategy.experimental_distribute_dataset(distrib.data.Dataset.from_tensor_slices((x, y)).batch(32)))
    loss_fn = torch.nn.CrossEntropyLoss(reduction="none")

    def step(inputs):
        xb, yb = inputs
        loss = distrib.nn.compute_average_loss(loss_fn(net(xb), yb), global_batch_size=32)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    sites = []
    for _ in range(4):
        with HostReads() as reads:
            strategy.run(step, (next(batches),))
        sites += reads.sites()
    assert sites == []


def test_the_counter_sees_each_kind_of_host_read_with_its_line():
    t = torch.tensor([1.5])
    with HostReads() as reads:
        t.sum().item()
        float(t)
        bool(t > 0)
        t.tolist()
        t.cpu()
        t.to("cpu")
        t.numpy()
        t.to(torch.float64)  # not a read: stays on its device
    assert [name.split(" (")[1] for name in reads.sites()] == ["item)", "__float__)", "__bool__)", "tolist)",
                                                                "cpu)", "to)", "numpy)"]
    assert all(site.startswith("tests/unit/test_host_reads.py:") for site in reads.sites())


def _metric_classes():
    import inspect

    return [name for name in distrib.metrics.__all__ if inspect.isclass(getattr(distrib.metrics, name))]


def test_no_metric_reads_on_the_host_or_copies_a_constant_to_the_device_in_an_update():
    """AUC, Precision, Recall and their kin once moved their thresholds to the device at every update
    (on a GPU a blocking copy), and R2Score its unit weight: each now keeps them where the predictions are."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=gen)
    labels = x[:, :3].argmax(1)
    pairs = [((x[:, :1] > 0).float(), torch.sigmoid(x[:, :1])), (labels, torch.softmax(x[:, :3], -1)),
             (torch.nn.functional.one_hot(labels, 3).float(), torch.softmax(x[:, :3], -1))]
    checked, reads = 0, {}
    for name in _metric_classes():
        try:
            metric = getattr(distrib.metrics, name)()
        except TypeError:  # needs arguments (e.g. a constraint value)
            continue
        for y, y_pred in pairs:
            try:
                metric.update_state(y, y_pred)  # the first update may build and place the state
            except (ValueError, RuntimeError):
                continue
            with HostReads() as counter:
                metric.update_state(y, y_pred)
            checked += 1
            if counter.count:
                reads[name] = counter.sites()
            break
    assert checked >= 30
    assert reads == {}
