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
    assert lender.lend() is None  # not sized yet: the first results go by value
    lender.learn(1000)
    slot = lender.lend()
    assert write_into(slot, torch.zeros(10_000_000)) is None               # too large
    assert write_into(slot, torch.zeros(4, dtype=torch.bfloat16)) is None  # numpy has no bfloat16
    assert write_into(slot, ["not", "tensors"]) is None
    assert write_into(Slot("/dev/shm/distrib-no-such-file", 1 << 16), torch.zeros(4)) is None
    lender.give_back(slot)
    assert lender.lend().name == slot.name  # the same file, lent again
    lender.close()
    assert lender.lend() is None and _mine() == []


def test_a_full_dev_shm_means_by_value_not_a_crash(monkeypatch):
    def no_room(size):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(shared_slots, "_Segment", no_room)
    lender = SlotLender()
    lender.learn(1 << 20)
    assert lender.lend() is None and lender.lend() is None
    full = SlotLender(max_bytes=0)
    full.learn(1 << 20)
    assert full.lend() is None
    ds = processes(Dataset.range(40).map(big, num_parallel_calls=2))
    assert [int(b) for _, b, _ in ds] == [i % 7 for i in range(40)]
