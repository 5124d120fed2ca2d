"""On a GPU: device datasets are gathered there, host batches arrive ahead of the step, no step synchronises.

Marked `cuda` (run by ``./scripts/test.sh`` and ``scripts/gpu_check.sh`` where
torch sees a GPU). The CPU side of the same paths is tested in
``test_input_lookahead.py`` and ``test_host_reads.py``.
"""
from __future__ import annotations

import pytest
import torch

import distrib

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _fit(x, y, callbacks=(), steps=None):
    strategy = distrib.OneDeviceStrategy("cuda:0")
    with strategy.scope():
        torch.manual_seed(0)
        model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3)))
        model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    model.log_every = 10_000
    dataset = distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).batch(32)
    history = model.fit(dataset, epochs=2, verbose=0, callbacks=list(callbacks))
    return model, history


def _data():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(320, 8, generator=gen)
    return x, x[:, :3].argmax(1)


def test_a_dataset_of_gpu_tensors_trains_as_the_same_dataset_on_the_host():
    x, y = _data()
    on_host, h_host = _fit(x, y)
    on_gpu, h_gpu = _fit(x.cuda(), y.cuda())
    for a, b in zip(on_host.get_weights(), on_gpu.get_weights()):
        torch.testing.assert_close(torch.as_tensor(a), torch.as_tensor(b))
    assert h_gpu.history["loss"] == pytest.approx(h_host.history["loss"], rel=1e-5)


class _NoSync(distrib.callbacks.Callback):
    """Turns torch's CUDA sync checker to "error" between each batch's begin and end hooks."""

    def on_train_batch_begin(self, batch, logs=None):
        if batch > 0:
            torch.cuda.set_sync_debug_mode("error")

    def on_train_batch_end(self, batch, logs=None):
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("where", ["host", "gpu"])
def test_no_fit_step_synchronises_the_gpu(where):
    x, y = _data()
    if where == "gpu":
        x, y = x.cuda(), y.cuda()
    _fit(x, y, callbacks=[_NoSync()])  # a synchronising call inside a step raises
