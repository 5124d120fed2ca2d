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


@pytest.mark.parametrize("from_logits", [True, False])
def test_float16_on_the_cpu_works_where_torch_has_no_half_nll_loss_kernel(monkeypatch, from_logits):
    """Issue 50: at torch 2.3.1 the CPU ``nll_loss`` has no float16 kernel (``"nll_loss_out_frame" not
    implemented for 'Half'``); the loss then takes the gather, the same values in float16. Here that
    torch is imitated: its nll_loss refuses CPU float16, whatever this torch can do."""
    from distrib.losses import crossentropy

    real_nll_loss = F.nll_loss

    def nll_loss_of_torch_2_3(input, target, *args, **kwargs):
        if input.device.type == "cpu" and input.dtype == torch.float16:
            raise RuntimeError("\"nll_loss_out_frame\" not implemented for 'Half'")
        return real_nll_loss(input, target, *args, **kwargs)

    monkeypatch.setattr(F, "nll_loss", nll_loss_of_torch_2_3)
    monkeypatch.setattr(crossentropy, "_CPU_NLL_KERNEL", {})
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(16, 5, generator=gen)
    if not from_logits:
        scores = scores.softmax(-1)
    scores = scores.half().requires_grad_()
    labels = torch.randint(0, 5, (16,), generator=gen)
    losses = sparse_categorical_crossentropy(labels, scores, from_logits=from_logits)
    log_probs = crossentropy._log_probs(scores, from_logits)
    assert losses.dtype == torch.float16
    assert torch.equal(losses, -log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1))
    losses.sum().backward()
    assert scores.grad is not None and scores.grad.dtype == torch.float16
    assert crossentropy._CPU_NLL_KERNEL == {torch.float16: False}
    float32 = sparse_categorical_crossentropy(labels, scores.detach().float(), from_logits=from_logits)
    assert crossentropy._CPU_NLL_KERNEL == {torch.float16: False, torch.float32: True}  # float32 keeps the kernel
    torch.testing.assert_close(losses.float(), float32, atol=2e-2, rtol=2e-2)
    with pytest.raises(ValueError, match="sparse_categorical_crossentropy"):  # bad labels: still the named error
        sparse_categorical_crossentropy(torch.tensor([0, 7]), scores[:2], from_logits=from_logits)


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
