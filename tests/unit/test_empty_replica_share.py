"""A replica whose share of a global batch is empty adds 0 to the loss, not NaN (issue 39, item 1)."""
import math

import pytest
import torch

import distrib
from distrib.training.compile_config import CompiledLoss


@pytest.mark.parametrize("loss", ["mse", "mae", "binary_crossentropy", "huber",
                                  distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                                  distrib.losses.MeanSquaredError(reduction="sum")])
def test_an_empty_share_is_zero_with_a_gradient_path(loss):
    sparse = isinstance(loss, distrib.losses.SparseCategoricalCrossentropy)
    layer = torch.nn.Linear(3, 4 if sparse else 1)
    y_pred = layer(torch.zeros(0, 3))
    y_true = torch.zeros(0, dtype=torch.int64) if sparse else torch.zeros(0, 1)
    share = CompiledLoss(loss, None)(y_true, y_pred, None, 1)
    assert share.dim() == 0 and share.item() == 0.0 and not math.isnan(share.item())
    share.backward()                       # every replica runs backward, the empty one too
    assert torch.count_nonzero(layer.weight.grad) == 0


def test_shares_of_a_split_partial_batch_add_up_to_the_one_process_loss():
    # a last batch of 1 example on 2 replicas: replica 0 holds it, replica 1 holds nothing
    y_true, y_pred = torch.tensor([[2.0]]), torch.tensor([[0.5]])
    loss = CompiledLoss("mse", None)
    shares = [loss(y_true, y_pred, None, 1), loss(y_true[:0], y_pred[:0], None, 1)]
    assert sum(s.item() for s in shares) == pytest.approx(2.25)


def test_an_empty_share_with_sample_weights_is_zero():
    loss = CompiledLoss("mse", None)
    share = loss(torch.zeros(0, 1), torch.zeros(0, 1, requires_grad=True), torch.zeros(0), 3)
    assert share.item() == 0.0
