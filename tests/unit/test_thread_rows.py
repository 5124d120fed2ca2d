"""Map threads write a batch's large tensors into the rows the batch views (issue 48): the serial
map's values, kept rows and batches never overwritten, and the stacked batch wherever a result does
not fit its row."""
from __future__ import annotations

import gc

import pytest
import torch

from distrib.data import Dataset, Options
from distrib.data import batch_buffers
from distrib.data.parallel.thread_rows import RowLender, into_rows

pytestmark = pytest.mark.timeout(120)


def image(i):
    """A 96 KiB image-like row (64 of them: 6 MiB, a pooled batch) and an int64 label."""
    i = int(i)
    return torch.full((64, 128, 3), float(i)) + torch.arange(3.0), torch.tensor(i, dtype=torch.int64)


def test_a_batch_after_a_thread_map_views_the_rows_its_threads_wrote_and_equals_the_serial_batch():
    serial = list(Dataset.range(300).map(image).batch(64))
    kept = list(Dataset.range(300).map(image, num_parallel_calls=2).batch(64))
    assert len(kept) == len(serial) == 5
    for (a, b), (x, y) in zip(kept, serial):
        assert torch.equal(a, x) and torch.equal(b, y)
    # the first batch holds the results in flight before the first one laid the rows out: stacked;
    # later ones view the block their rows were written into, and the small labels are stacked
    assert all(a._base is not None for a, _ in kept[1:])
    assert all(b._base is None for _, b in kept)
    assert len({a.untyped_storage().data_ptr() for a, _ in kept}) == 5  # kept batches: their own blocks


def test_blocks_are_lent_again_once_their_batches_die_and_a_kept_row_keeps_its_block():
    it = iter(Dataset.range(64 * 12).map(image, num_parallel_calls=2).batch(64))
    storages, firsts, one_row = set(), [], None
    for a, b in it:
        storages.add(a.untyped_storage().data_ptr())
        firsts.append(int(b[0]))
        if one_row is None and a._base is not None:
            one_row = a[5].clone(), a[5]  # a view into a lent block, kept to the end
    assert firsts == list(range(0, 64 * 12, 64))
    assert len(storages) < 11  # blocks served several batches each
    assert one_row is not None and torch.equal(one_row[0], one_row[1])  # its block was never lent again


def varying(i):
    i = int(i)
    side = 64 if i < 40 or i % 3 else 65  # later elements change shape: they cannot fit the first's rows
    return torch.full((side, 128, 3), float(i))


def test_results_that_do_not_fit_their_rows_are_batched_as_they_are():
    serial = [e for e in Dataset.range(200).map(varying)]
    got = [e for e in Dataset.range(200).map(varying, num_parallel_calls=2)]
    assert len(got) == 200 and all(torch.equal(a, b) for a, b in zip(got, serial))
    padded = list(Dataset.range(200).map(varying, num_parallel_calls=2).padded_batch(64))
    expect = list(Dataset.range(200).map(varying).padded_batch(64))
    assert all(torch.equal(a, b) for a, b in zip(padded, expect))


def test_no_rows_out_of_order_or_where_the_result_keeps_its_graph():
    options = Options()
    options.deterministic = False
    loose = Dataset.range(200).map(image, num_parallel_calls=2).with_options(options).batch(64)
    assert sorted(int(v) for _, b in loose for v in b) == list(range(200))
    w = torch.ones(3, requires_grad=True)
    graphs = list(Dataset.range(130).map(lambda i: image(i)[0] * w, num_parallel_calls=2).batch(64))
    assert all(g.requires_grad for g in graphs)  # stacked with autograd, as the serial batch is


def test_the_lender_lays_rows_out_for_large_leaves_only_and_stops_on_a_misfit():
    lender = RowLender(rows=2)
    assert lender.lend(0) is None  # before the first result
    lender.learn((torch.zeros(1024, 1024), torch.tensor(3), "text"))
    rows = lender.lend(8)
    assert rows[0].shape == (1024, 1024) and rows[1] is None and rows[2] is None
    filled, fitted = into_rows((torch.ones(1024, 1024), torch.tensor(4), "text"), rows)
    assert fitted and filled[0].data_ptr() == rows[0].data_ptr() and float(filled[0].sum()) == 1024 * 1024
    same_block = lender.lend(9)[0]
    assert same_block.data_ptr() == rows[0].data_ptr() + 1024 * 1024 * 4
    _, fitted = into_rows((torch.ones(1024, 1023), torch.tensor(4), "text"), lender.lend(11))
    assert not fitted
    lender.stop()
    assert lender.lend(12) is None
    small = RowLender(rows=8)
    small.learn(torch.zeros(16))  # 8 rows of 64 bytes: left to torch.stack
    assert small.lend(0) is None


def test_a_rows_block_goes_back_to_the_pool_only_when_its_last_view_dies():
    size = (8 << 20) + 4160  # a size no other test's batch has
    gc.collect()
    before = batch_buffers.pooled_bytes()
    block = batch_buffers.rows_block(size)
    row = block[:1024]
    address = block.data_ptr()
    del block
    gc.collect()
    assert batch_buffers.pooled_bytes() == before  # the row still views it
    parts = [row[k * 256:(k + 1) * 256] for k in range(4)]
    assert batch_buffers.stacked(parts).data_ptr() == address  # still lent as rows: viewed, not stacked
    del row, parts
    gc.collect()
    assert batch_buffers.pooled_bytes() == before + size
