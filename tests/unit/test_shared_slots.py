"""Worker processes hand their results back through shared-memory slots (issue 48): the serial map's
values, rows the user keeps never overwritten, nothing left in /dev/shm, by value where a slot cannot serve."""
from __future__ import annotations

import gc
import os

import pytest
import torch

from distrib.data import Dataset, Options
from distrib.data.parallel import shared_slots
from distrib.data.parallel.shared_slots import Slot, SlotLender, write_into

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")]


def _mine():
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(f"distrib-{os.getpid()}-"))


def big(i):
    """A 256 KiB float row, a small label and a string: one element with three kinds of leaves."""
    i = int(i)
    return torch.full((256, 256), float(i)) + torch.arange(256.0), torch.tensor(i % 7), b"row-%d" % i


def processes(ds):
    options = Options()
    options.threading.workers = "processes"
    return ds.with_options(options)


def test_process_results_equal_the_serial_map_and_kept_rows_are_never_overwritten():
    serial = list(Dataset.range(120).map(big))
    it = iter(processes(Dataset.range(120).map(big, num_parallel_calls=2)))
    kept, files_seen = [], set()
    for element in it:
        kept.append(element)  # every row held: no slot may be lent again while its row lives
        files_seen.update(_mine())
    assert files_seen, "no result came back through a shared-memory slot"
    assert len(kept) == len(serial)
    for (a, b, c), (x, y, z) in zip(kept, serial):
        assert torch.equal(a, x) and torch.equal(b, y) and bytes(c) == bytes(z)
    del it
    gc.collect()
    assert _mine() == []  # the iterator's slots are unlinked with it


def test_slots_are_recycled_once_their_rows_die_and_batches_stay_exact():
    ds = processes(Dataset.range(200).map(big, num_parallel_calls=2)).batch(16)
    seen, files = [], set()
    for a, b, _ in ds:
        seen.append((float(a[:, 0, 0].sum()), int(b.sum())))
        files.update(_mine())
    assert seen == [(float(sum(range(k, min(k + 16, 200)))), sum(i % 7 for i in range(k, min(k + 16, 200))))
                    for k in range(0, 200, 16)]
    assert 0 < len(files) < 200  # slots served many rows each
    gc.collect()
    assert _mine() == []


def test_what_a_slot_cannot_hold_goes_by_value():
    lender = SlotLender()
    assert lender.lend(0) is None  # not sized yet: the first results go by value
    lender.learn([1000])
    slot = lender.lend(0)
    assert write_into(slot, torch.zeros(10_000_000)) is None               # too large
    assert write_into(slot, torch.zeros(4, dtype=torch.bfloat16)) is None  # numpy has no bfloat16
    assert write_into(slot, ["not", "tensors"]) is None
    assert write_into(Slot("/dev/shm/distrib-no-such-file", 1 << 16, ((0, 1 << 16),)), torch.zeros(4)) is None
    lender.give_back(slot)
    assert lender.lend(1).name == slot.name  # the same file, lent again
    lender.close()
    assert lender.lend(2) is None and _mine() == []


def test_a_full_dev_shm_means_by_value_not_a_crash(monkeypatch):
    def no_room(size):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(shared_slots, "_Segment", no_room)
    lender = SlotLender()
    lender.learn([1 << 20])
    assert lender.lend(0) is None and lender.lend(1) is None
    full = SlotLender(max_bytes=0)
    full.learn([1 << 20])
    assert full.lend(0) is None
    ds = processes(Dataset.range(40).map(big, num_parallel_calls=2))
    assert [int(b) for _, b, _ in ds] == [i % 7 for i in range(40)]


def test_tensor_leaves_travel_in_the_slot_beside_leaves_that_cannot():
    lender = SlotLender(rows=4)
    lender.learn([256 * 256 * 4, 8, None])
    slot = lender.lend(5)
    written = write_into(slot, big(5))
    assert [type(leaf).__name__ for leaf in written] == ["InSlot", "InSlot", "bytes"]
    a, b, c = lender.receive(slot, written)
    x, y, z = big(5)
    assert torch.equal(a, x) and torch.equal(b, y) and c == z
    del a, b
    lender.close()


def wide(i):
    """A 48 KiB image-like row and an int64 label: rows of a batch laid out in place."""
    i = int(i)
    return torch.full((64, 64, 3), float(i)), torch.tensor(i, dtype=torch.int64)


def test_a_batch_after_a_process_map_is_its_rows_in_place_and_kept_batches_stay_intact():
    serial = list(Dataset.range(70).map(wide).batch(16))
    kept = list(processes(Dataset.range(70).map(wide, num_parallel_calls=2)).batch(16))
    assert len(kept) == len(serial) == 5
    for (a, b), (x, y) in zip(kept, serial):
        assert torch.equal(a, x) and torch.equal(b, y)
    # past the first 32 elements (in flight before the first result sized the slots: by value),
    # batches view the rows the workers wrote (no stacked copy); kept batches stay intact while
    # later groups are lent
    assert all(a._base is None for a, _ in kept[:2])
    assert all(a._base is not None and b._base is not None for a, b in kept[2:])
    assert len({a.untyped_storage().data_ptr() for a, _ in kept}) == 5
    del kept
    gc.collect()
    assert _mine() == []


def test_groups_are_lent_again_once_their_batches_die_and_a_kept_row_keeps_its_group():
    ds = processes(Dataset.range(160).map(wide, num_parallel_calls=2)).batch(16)
    storages, sums, one_row = set(), [], None
    for a, b in ds:
        storages.add(a.untyped_storage().data_ptr())
        sums.append(int(b.sum()))
        if one_row is None:
            one_row = a[3].clone(), a[3]  # a view into the first group, kept to the end
    assert sums == [sum(range(k, k + 16)) for k in range(0, 160, 16)]
    assert len(storages) < 10  # groups served several batches each
    assert torch.equal(one_row[0], one_row[1])  # the kept row's group was never lent again
    del one_row
    gc.collect()
    assert _mine() == []


def test_a_group_too_large_for_dev_shm_falls_back_to_a_slot_per_element():
    lender = SlotLender(max_bytes=8 << 20, rows=64)
    lender.learn([1 << 20])  # 64 rows of 1 MiB would take 64 MiB
    first, second = lender.lend(0), lender.lend(1)
    assert first.name != second.name  # one file per element
    lender.close()
