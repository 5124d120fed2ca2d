"""The per-step fast paths of the Keras losses compute exactly what the general forms computed.

Sparse cross-entropy of 2-D predictions takes one ``nll_loss`` kernel instead
of ``-gather(log_softmax)``; the mean reductions divide by the count as a
Python number (on the CPU) instead of a tensor made for it each step. Each is
compared bit for bit, values and gradients, with the form it replaced.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import distrib
from distrib.losses.crossentropy import sparse_categorical_crossentropy
from distrib.losses.reduction import divide_by_count, reduce_weighted


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_sparse_cross_entropy_in_one_kernel_equals_the_gather_bit_for_bit(dtype):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 10, generator=gen).to(dtype).requires_grad_()
    labels = torch.randint(0, 10, (64,), generator=gen)
    weights = torch.randn(64, generator=gen).to(dtype)
    fast = sparse_categorical_crossentropy(labels, logits, from_logits=True)
    general = -F.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert torch.equal(fast, general)
    (g_fast,) = torch.autograd.grad((fast * weights).sum(), logits)
    (g_general,) = torch.autograd.grad((general * weights).sum(), logits)
    assert torch.equal(g_fast, g_general)


def test_a_label_out_of_range_is_still_the_named_error():
    with pytest.raises(ValueError, match="sparse_categorical_crossentropy"):
        sparse_categorical_crossentropy(torch.tensor([0, -100]), torch.randn(2, 3), from_logits=True)


@pytest.mark.parametrize("count", [1, 3, 32, 37, 1000, 12345, 1 << 24])
def test_dividing_by_a_count_equals_dividing_by_the_count_as_a_tensor(count):
    total = torch.randn(50, generator=torch.Generator().manual_seed(count)) * 1000
    for t in (total, total[0]):
        assert torch.equal(divide_by_count(t, count), t / torch.tensor(float(count)))
    half = total.to(torch.bfloat16)  # where the count is not exact in the dtype: divided as the dtype's count
    assert torch.equal(divide_by_count(half, count), half / torch.tensor(float(count), dtype=torch.bfloat16))


@pytest.mark.parametrize("shape", [(7,), (4, 5), (0, 3)])
def test_the_mean_reduction_equals_the_general_where_form(shape):
    values = torch.randn(shape, generator=torch.Generator().manual_seed(1), requires_grad=True)
    fast = reduce_weighted(values, None, "sum_over_batch_size")
    divisor = torch.tensor(float(values.numel()))
    general = torch.where(divisor != 0, values.sum() / torch.where(divisor != 0, divisor, 1.0), 0.0)
    assert torch.equal(fast, general)
    if values.numel():
        assert torch.equal(torch.autograd.grad(fast, values)[0], torch.autograd.grad(general, values)[0])


def test_compute_average_loss_divides_by_the_global_batch_as_before():
    per_example = torch.randn(6, generator=torch.Generator().manual_seed(2))
    for dtype in (torch.float32, torch.float16):
        loss = per_example.to(dtype)
        expected = loss.sum() / torch.tensor(24, dtype=dtype)
        assert torch.equal(distrib.nn.compute_average_loss(loss, global_batch_size=24), expected)
