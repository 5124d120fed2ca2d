"""Input read ahead (`InputOptions.experimental_per_replica_buffer_size`) gives the batches and positions of none.

On a GPU the read-ahead batches are copied to the device while earlier steps
compute; on the CPU the copy is a no-op, and asking for a buffer explicitly
runs the same read-ahead path, so these tests hold it to the path without it:
the same batches bit for bit, a checkpointed position that resumes at the
first batch not handed out, `fit` with the same weights and an interrupted
`fit` resuming exactly, and a resize (elastic) splitting the same global
batches anew. A dataset of device tensors is gathered on its device
(checked here on the ``meta`` device, which has shapes but no values).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import distrib
from distrib.data import Dataset
from distrib.data.blocks import TensorTable
from distrib.data.distribution.distributed import distribute_dataset
from distrib.data.distribution.input_context import InputContext, InputPlacement
from distrib.comm.collective import LocalCollective


class Host:
    """An `InputHost` of one replica of ``replicas`` (the test may change the placement: a resize)."""

    def __init__(self, replicas=1, replica=0):
        self.placement = InputPlacement(num_input_pipelines=replicas, input_pipeline_id=replica)
        self.collective = LocalCollective()
        self.device = torch.device("cpu")

    def input_placement(self):
        return self.placement

    def input_context(self):
        return InputContext(self.placement.num_input_pipelines, self.placement.input_pipeline_id)


def _pipeline():
    """Shuffled, with an element-wise and a batch-level map (a partial last batch: 50 = 6 * 8 + 2)."""
    x = torch.arange(50.0).reshape(50, 1)
    ds = Dataset.from_tensor_slices((x, torch.arange(50)))
    ds = ds.shuffle(50, seed=3).map(lambda a, b: (a * 2.0, b)).batch(8).map(lambda a, b: (a + 1.0, b))
    return ds


def _options(depth):
    return None if depth is None else distrib.InputOptions(experimental_per_replica_buffer_size=depth)


def _all(it):
    return [[t.tolist() for t in batch] for batch in it]


@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("depth", [1, 3, 10])
def test_reading_ahead_hands_out_the_same_batches(depth, replicas):
    for replica in range(replicas):
        plain = _all(iter(distribute_dataset(Host(replicas, replica), _pipeline())))
        ahead = _all(iter(distribute_dataset(Host(replicas, replica), _pipeline(), _options(depth))))
        assert ahead == plain
        assert len(plain) == 7


@pytest.mark.parametrize("stop_after", [0, 1, 4, 6])
def test_a_position_saved_while_reading_ahead_resumes_at_the_first_batch_not_handed_out(stop_after):
    expected = _all(iter(distribute_dataset(Host(), _pipeline())))
    dist = distribute_dataset(Host(), _pipeline(), _options(3))
    it = iter(dist)
    seen = [[t.tolist() for t in next(it)] for _ in range(stop_after)]
    state = dist.state_dict()
    resumed = distribute_dataset(Host(), _pipeline(), _options(3))
    resumed.load_state_dict(state)
    assert seen + _all(iter(resumed)) == expected
    # the position does not depend on the read-ahead: a reader without it resumes from it the same way
    without = distribute_dataset(Host(), _pipeline())
    without.load_state_dict(state)
    assert seen + _all(iter(without)) == expected


def test_a_resize_while_reading_ahead_splits_the_same_global_batches_anew():
    host = Host(3, 2)
    it = iter(distribute_dataset(host, Dataset.from_tensor_slices(torch.arange(24.0)).batch(6), _options(2)))
    assert next(it).tolist() == [4.0, 5.0]   # batches 2 and 3 are read ahead for 3 replicas
    host.placement = InputPlacement(num_input_pipelines=2, input_pipeline_id=1)
    assert next(it).tolist() == [9.0, 10.0, 11.0]   # rows 3..5 of the second global batch
    assert it.next_with_global_size()[1] == 6
    assert next(it).tolist() == [21.0, 22.0, 23.0]


def _fit(depth, x, y, epochs=2, callbacks=(), initial=None):
    strategy = distrib.get_strategy()
    with strategy.scope():
        torch.manual_seed(0)
        model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)))
        model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    ds = Dataset.from_tensor_slices((x, y)).shuffle(96, seed=1).batch(16)
    dist = strategy.experimental_distribute_dataset(ds, _options(depth))
    history = model.fit(dist, epochs=epochs, verbose=0, callbacks=list(callbacks))
    return model, history


def _data():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=gen)
    return x, x[:, :3].argmax(1)


def test_fit_over_a_dataset_read_ahead_trains_bit_identically():
    x, y = _data()
    plain, h_plain = _fit(None, x, y)
    ahead, h_ahead = _fit(4, x, y)
    for a, b in zip(plain.get_weights(), ahead.get_weights()):
        assert np.array_equal(a, b)
    assert h_plain.history == h_ahead.history


class _Interrupt(distrib.callbacks.Callback):
    def __init__(self, at):
        super().__init__()
        self.at = at

    def on_train_batch_end(self, batch, logs=None):
        if self.model.train_loop_state.global_step == self.at:
            raise KeyboardInterrupt("simulated crash")


def test_an_interrupted_fit_reading_ahead_resumes_exactly(tmp_path):
    x, y = _data()
    uninterrupted, _ = _fit(3, x, y, epochs=3)
    backup = distrib.callbacks.BackupAndRestore(str(tmp_path), save_freq=4)
    with pytest.raises(KeyboardInterrupt):
        _fit(3, x, y, epochs=3, callbacks=[backup, _Interrupt(at=9)])  # mid-epoch 2, saved at step 8
    resumed, _ = _fit(3, x, y, epochs=3, callbacks=[distrib.callbacks.BackupAndRestore(str(tmp_path), save_freq=4)])
    for a, b in zip(uninterrupted.get_weights(), resumed.get_weights()):
        assert np.array_equal(a, b)


def test_a_dataset_of_device_tensors_is_gathered_on_their_device():
    """The crash this fixes: ``index is on cpu`` from ``index_select`` on device tensors (meta stands in)."""
    x = torch.empty(10, 3, device="meta")
    y = torch.arange(10)
    table = TensorTable((x, y))
    xb, yb = table.gather(np.array([7, 2, 5]))
    assert xb.device.type == "meta" and tuple(xb.shape) == (3, 3)
    assert yb.tolist() == [7, 2, 5]


def test_input_options_refuse_what_distrib_does_not_do_in_one_line():
    with pytest.raises(ValueError, match="buffer_size"):
        distrib.InputOptions(experimental_per_replica_buffer_size=-1)
    with pytest.raises(ValueError, match="PER_WORKER"):
        distrib.InputOptions(experimental_replication_mode=distrib.InputReplicationMode.PER_REPLICA)
    with pytest.raises(ValueError, match="from_tensor_slices"):
        distrib.InputOptions(experimental_place_dataset_on_device=True)
    options = distrib.InputOptions()
    assert options.buffer_size(torch.device("cpu")) == 0
    assert options.buffer_size(torch.device("cuda", 0)) == 2
    assert distrib.InputOptions(experimental_fetch_to_device=False).buffer_size(torch.device("cuda", 0)) == 0


def test_per_worker_input_read_ahead_ends_and_resumes_as_without():
    """A dataset function's input (per worker: its end is agreed from the first element, read ahead)."""
    from distrib.data.distribution.distributed import distribute_from_function

    class TwinCollective(LocalCollective):
        """Stands in for 2 workers that read alike (what ``all_gather_json`` gathers twice)."""

        def all_gather_json(self, value):
            return [value, value]

    def host():
        h = Host(2, 1)
        h.collective = TwinCollective()
        return h

    def fn(context):
        return Dataset.from_tensor_slices(torch.arange(20.0)).shard(
            context.num_input_pipelines, context.input_pipeline_id).batch(3)

    plain = [b.tolist() for b in distribute_from_function(host(), fn)]
    dist = distribute_from_function(host(), fn, _options(2))
    it = iter(dist)
    seen = [next(it).tolist(), next(it).tolist()]
    state = dist.state_dict()
    rest = [b.tolist() for b in it]
    assert seen + rest == plain
    resumed = distribute_from_function(host(), fn, _options(2))
    resumed.load_state_dict(state)
    assert seen + [b.tolist() for b in resumed] == plain
