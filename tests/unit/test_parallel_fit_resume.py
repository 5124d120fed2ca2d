"""``fit`` over a parallel map + prefetch, interrupted with work in flight, resumes exactly with BackupAndRestore."""
import numpy as np
import pytest
import torch

import distrib
from distrib.data import Dataset
from distrib.data.transforms.random_draws import uniform


def jitter(x, y):
    """A keyed random draw per element: resuming must give each element its own draw again."""
    return x + torch.tensor(uniform(None, 4), dtype=x.dtype) * 0.1, y


def _fit(n_calls, epochs=3, callbacks=()):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=gen)
    y = x[:, :3].argmax(1)
    strategy = distrib.get_strategy()
    with strategy.scope():
        torch.manual_seed(0)
        model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)))
        model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = (Dataset.from_tensor_slices((x, y)).shuffle(96, seed=1)
          .map(jitter, num_parallel_calls=n_calls).batch(16).prefetch(3))
    model.fit(strategy.experimental_distribute_dataset(ds), epochs=epochs, verbose=0, callbacks=list(callbacks))
    return model


class _Interrupt(distrib.callbacks.Callback):
    def __init__(self, at):
        super().__init__()
        self.at = at

    def on_train_batch_end(self, batch, logs=None):
        if self.model.train_loop_state.global_step == self.at:
            raise KeyboardInterrupt("simulated crash")


def test_parallel_map_trains_like_the_serial_one_and_resumes_exactly(tmp_path):
    serial = _fit(None)
    uninterrupted = _fit(3)
    for a, b in zip(serial.get_weights(), uninterrupted.get_weights()):
        assert np.array_equal(a, b)
    with pytest.raises(KeyboardInterrupt):
        _fit(3, callbacks=[distrib.callbacks.BackupAndRestore(str(tmp_path), save_freq=4), _Interrupt(at=9)])
    resumed = _fit(3, callbacks=[distrib.callbacks.BackupAndRestore(str(tmp_path), save_freq=4)])
    for a, b in zip(uninterrupted.get_weights(), resumed.get_weights()):
        assert np.array_equal(a, b)
