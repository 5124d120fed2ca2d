"""`distrib.nn.compute_average_loss` follows tf.nn; loss objects' reduction check outside replicas."""
from __future__ import annotations

import pytest
import torch

import distrib
from distrib.losses import MeanSquaredError, Reduction
from distrib.losses.reduction import LossReductionError


def test_rank_two_losses_sum_every_element_over_the_global_batch():
    # tf.nn.compute_average_loss(tf.reshape(tf.range(12.), (4, 3)), global_batch_size=4) == 16.5
    losses = torch.arange(12.0).reshape(4, 3)
    assert distrib.nn.compute_average_loss(losses, global_batch_size=4).item() == pytest.approx(16.5)
    assert distrib.nn.compute_average_loss(losses).item() == pytest.approx(16.5)  # default strategy: batch 4


def test_sample_weight_is_matched_and_broadcast_like_tf():
    losses = torch.arange(12.0).reshape(4, 3)
    per_example = torch.tensor([1.0, 0.0, 0.0, 1.0])
    assert distrib.nn.compute_average_loss(losses, sample_weight=per_example).item() == pytest.approx(33 / 4)
    assert distrib.nn.compute_average_loss(losses, sample_weight=per_example[:, None]).item() == pytest.approx(33 / 4)
    assert distrib.nn.compute_average_loss(torch.arange(4.0), sample_weight=per_example[:, None]).item() == 0.75
    assert distrib.nn.compute_average_loss(torch.arange(4.0), sample_weight=2.0).item() == pytest.approx(3.0)
    with pytest.raises(ValueError, match=r"sample_weight of shape \(3,\) does not broadcast"):
        distrib.nn.compute_average_loss(torch.ones(4), sample_weight=torch.ones(3))


def test_a_scalar_loss_and_bad_global_batch_sizes_are_errors():
    with pytest.raises(ValueError, match="must have rank >= 1.*loss reduction NONE"):
        distrib.nn.compute_average_loss(torch.tensor(2.0))
    with pytest.raises(ValueError, match="global_batch_size must be positive, got 0"):
        distrib.nn.compute_average_loss(torch.ones(4), global_batch_size=0)
    with pytest.raises(ValueError, match="global_batch_size must be an integer, got 2.5"):
        distrib.nn.compute_average_loss(torch.ones(4), global_batch_size=2.5)


def test_cross_replica_context_is_an_error_unless_the_global_batch_is_given():
    strategy = distrib.OneDeviceStrategy("cpu")
    with strategy.scope():
        with pytest.raises(RuntimeError, match="You are calling `compute_average_loss` in cross replica context"):
            distrib.nn.compute_average_loss(torch.ones(4))
        assert distrib.nn.compute_average_loss(torch.ones(4), global_batch_size=8).item() == 0.5


def test_default_reduction_is_fine_under_the_default_strategy_and_refused_in_run():
    mse = MeanSquaredError()
    assert mse(torch.zeros(2, 1), torch.ones(2, 1)).item() == 1.0  # default strategy: no error
    strategy = distrib.OneDeviceStrategy("cpu")
    with pytest.raises(LossReductionError, match="`distrib.losses.Reduction.SUM` or `distrib.losses.Reduction.NONE`"):
        strategy.run(lambda: mse(torch.zeros(2, 1), torch.ones(2, 1)))
    summed = MeanSquaredError(reduction=Reduction.SUM)
    assert strategy.run(lambda: summed(torch.zeros(2, 1), torch.ones(2, 1))).item() == 2.0


def test_model_fit_keeps_the_default_reduction_under_a_strategy():
    strategy = distrib.OneDeviceStrategy("cpu")
    with strategy.scope():
        model = distrib.Model(torch.nn.Linear(2, 1))
        model.compile(optimizer="sgd", loss=MeanSquaredError())
    history = model.fit(torch.ones(8, 2), torch.zeros(8, 1), batch_size=4, epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1
