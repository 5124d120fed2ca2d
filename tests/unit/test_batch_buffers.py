"""Large batches of computed elements are stacked into recycled memory (bench/RESULTS.md, issue 48)."""
from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from distrib.data import Dataset
from distrib.data import batch_buffers
from distrib.data.batch_buffers import stacked

ROW = (256, 1024)  # 1 MiB of float32 per row: a batch of 8 is pooled


def _rows(n, start=0.0):
    return [torch.full(ROW, start + i) for i in range(n)]


def test_a_large_batch_equals_torch_stack_and_its_block_serves_the_next_batch():
    rows = _rows(8)
    out = stacked(rows)
    assert torch.equal(out, torch.stack(rows)) and out.dtype == torch.float32 and out.is_contiguous()
    assert out.data_ptr() % 64 == 0
    ptr = out.data_ptr()
    del out
    gc.collect()
    again = stacked(_rows(8, 100.0))
    assert again.data_ptr() == ptr and float(again[3, 0, 0]) == 103.0


def test_a_view_kept_by_the_user_keeps_its_batch_out_of_the_pool():
    out = stacked(_rows(8))
    kept = out[2]  # a view: the batch's memory must not be handed out again
    ptr = out.data_ptr()
    del out
    gc.collect()
    other = stacked(_rows(8, 50.0))
    assert other.data_ptr() != ptr
    assert torch.equal(kept, torch.full(ROW, 2.0))
    numpy_view = other.numpy()
    del other
    gc.collect()
    assert stacked(_rows(8, 7.0)).data_ptr() != numpy_view.ctypes.data
    assert numpy_view[1, 0, 0] == 51.0


def test_small_batches_and_what_numpy_cannot_hold_are_plain_torch_stacks():
    small = stacked([torch.ones(3), torch.zeros(3)])
    assert torch.equal(small, torch.tensor([[1.0, 1, 1], [0, 0, 0]]))
    halves = [torch.ones(ROW, dtype=torch.bfloat16) for _ in range(8)]
    assert torch.equal(stacked(halves), torch.stack(halves))
    grads = [torch.ones(ROW, requires_grad=True) for _ in range(8)]
    assert stacked(grads).requires_grad  # autograd's stack, not the pool's
    mixed = [torch.ones(ROW)] * 4 + [torch.ones(ROW, dtype=torch.float64)] * 4
    assert stacked(mixed).dtype == torch.float64  # torch's promotion


def test_the_pool_keeps_a_bounded_number_of_idle_blocks():
    gc.collect()
    before = batch_buffers.pooled_bytes()  # other tests' idle blocks, of other sizes
    batches = [stacked(_rows(8)) for _ in range(batch_buffers.FREE_PER_SIZE + 3)]
    del batches
    gc.collect()
    assert batch_buffers.pooled_bytes() - before <= batch_buffers.FREE_PER_SIZE * 8 * 256 * 1024 * 4


def test_a_pipeline_of_large_computed_elements_batches_through_the_pool():
    ds = Dataset.range(24).map(lambda i: torch.full(ROW, float(i))).batch(8)
    seen = [b for b in ds]
    assert [float(b[:, 0, 0].sum()) for b in seen] == [float(sum(range(k, k + 8))) for k in (0, 8, 16)]
    assert all(np.shares_memory(b.numpy(), b.numpy()) for b in seen)
    with pytest.raises(ValueError, match="different shapes"):
        list(Dataset.range(8).map(lambda i: torch.zeros(ROW if i else (256, 1023))).batch(8))
