"""`Dataset.cache(filename)`: written by the first complete pass, read afterwards, never read unfinished."""
import collections
import gc
import json
import logging
import os
import textwrap

import numpy as np
import pytest
import torch

from distrib.data import Dataset
from distrib.data.caching import cache_file, records
from distrib.data.caching.cache_file import CacheFileError, cache_path
from distrib.testing import run_python

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


class Counted:
    """A map function that counts its calls (the proof that a pass read the file, not the input)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        n = int(x)
        return {"x": x * 10, "name": "v" * (n % 3), "pair": (torch.full((2,), float(n)), x)}


def same(a, b):
    """Elements equal leaf by leaf (tensors, strings, nesting)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and bool((a == b).all())
    return a == b and type(a) in (type(b), str, np.str_) and type(b) in (type(a), str, np.str_)


def all_same(xs, ys):
    return len(xs) == len(ys) and all(same(x, y) for x, y in zip(xs, ys))


def leftovers(directory):
    return sorted(p for p in os.listdir(directory) if ".tmp-" in p)


@pytest.fixture
def small_records(monkeypatch):
    monkeypatch.setattr(cache_file, "RECORD_ELEMENTS", 4)


def test_first_pass_writes_the_file_and_later_passes_and_runs_read_it(tmp_path, small_records):
    f = Counted()
    ds = Dataset.range(10).map(f).cache(str(tmp_path / "c"))
    first = list(ds)
    assert f.calls == 10 and os.path.exists(cache_path(str(tmp_path / "c"), ""))
    second = list(ds)
    assert f.calls == 10 and all_same(first, second)
    g = Counted()   # a later run of the program: new objects, the file is all it shares
    third = list(Dataset.range(10).map(g).cache(str(tmp_path / "c")))
    assert g.calls == 0 and all_same(first, third)
    assert [int(e["x"]) for e in third] == [10 * i for i in range(10)]


def test_repeat_after_cache_reads_the_file_on_the_second_repetition(tmp_path, small_records):
    f = Counted()
    out = [int(e["x"]) for e in Dataset.range(6).map(f).cache(str(tmp_path / "c")).repeat(3)]
    assert out == [10 * i for i in range(6)] * 3 and f.calls == 6


def test_a_shuffle_before_the_cache_is_frozen_by_it(tmp_path):
    ds = Dataset.range(20).shuffle(20, seed=3).cache(str(tmp_path / "c"))
    assert [int(v) for v in ds] == [int(v) for v in ds]


def test_an_abandoned_pass_leaves_nothing_that_is_read(tmp_path, small_records):
    f = Counted()
    ds = Dataset.range(10).map(f).cache(str(tmp_path / "c"))
    it = iter(ds)
    [next(it) for _ in range(7)]
    del it
    gc.collect()
    assert os.listdir(tmp_path) == []          # the temporary file went with its iterator
    assert [int(e["x"]) for e in ds.take(3)] == [0, 10, 20]
    gc.collect()
    assert os.listdir(tmp_path) == []
    f.calls = 0
    assert len(list(ds)) == 10 and f.calls == 10   # the next complete pass ran the input


def test_leftovers_of_a_crashed_writer_are_never_read(tmp_path, small_records, caplog):
    path = cache_path(str(tmp_path / "c"), "")
    full = list(Dataset.range(10).map(Counted()).cache(str(tmp_path / "c")))
    data = open(path, "rb").read()
    with open(path + ".tmp-99999-deadbeef", "wb") as h:   # a dead writer's temporary file
        h.write(data)
    with open(path, "wb") as h:                           # and a final name cut short
        h.write(data[: len(data) // 2])
    f = Counted()
    with caplog.at_level(logging.WARNING, logger="distrib.data"):
        again = list(Dataset.range(10).map(f).cache(str(tmp_path / "c")))
    assert f.calls == 10 and all_same(full, again)
    assert any(path in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    assert open(path, "rb").read() == data                 # rebuilt whole


@pytest.mark.parametrize("damage", ["garbage", "foreign", "index"])
def test_a_file_that_does_not_fit_is_one_warning_and_a_rebuild(tmp_path, caplog, damage):
    path = cache_path(str(tmp_path / "c"), "")
    if damage == "garbage":
        open(path, "wb").write(os.urandom(3000))
    elif damage == "foreign":   # written by another pipeline
        list(Dataset.range(4).cache(str(tmp_path / "c")))
    else:                       # a valid frame whose index claims far more than the file holds
        list(Dataset.range(10).map(Counted()).cache(str(tmp_path / "c")))
        raw = bytearray(open(path, "rb").read())
        raw[-16:-8] = (len(raw) * 4).to_bytes(8, "little")
        open(path, "wb").write(bytes(raw))
    f = Counted()
    with caplog.at_level(logging.WARNING, logger="distrib.data"):
        out = list(Dataset.range(10).map(f).cache(str(tmp_path / "c")))
    assert f.calls == 10 and [int(e["x"]) for e in out] == [10 * i for i in range(10)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and path in warnings[0] and "rebuilding" in warnings[0]


def test_a_record_damaged_inside_is_one_error_naming_the_file_and_offset(tmp_path, small_records):
    path = cache_path(str(tmp_path / "c"), "")
    list(Dataset.range(10).map(Counted()).cache(str(tmp_path / "c")))
    raw = bytearray(open(path, "rb").read())
    index = json.loads(bytes(raw[raw.rindex(b"{\"format\""):-16]))
    offset = index["records"][1][0]
    raw[offset + 20] ^= 0xFF
    open(path, "wb").write(bytes(raw))
    it = iter(Dataset.range(10).map(Counted()).cache(str(tmp_path / "c")))
    assert [int(next(it)["x"]) for _ in range(4)] == [0, 10, 20, 30]   # record 0 is intact
    with pytest.raises(CacheFileError, match=f"{path} is damaged at byte {offset}: checksum mismatch"):
        next(it)


def test_two_datasets_with_one_filename_in_one_process(tmp_path, small_records):
    name = str(tmp_path / "c")
    a = Dataset.range(9).map(lambda x: x * 2).cache(name)
    b = Dataset.range(9).map(lambda x: x * 3).cache(name)
    ia, ib = iter(a), iter(b)
    got_a, got_b = [], []
    for _ in range(9):   # both fill at once, each into its own temporary file
        got_a.append(int(next(ia)))
        got_b.append(int(next(ib)))
    assert leftovers(tmp_path) and len(leftovers(tmp_path)) == 2
    assert next(ia, None) is None and next(ib, None) is None   # both publish, b last
    assert got_a == [2 * i for i in range(9)] and got_b == [3 * i for i in range(9)]
    assert leftovers(tmp_path) == []
    assert [int(v) for v in a] == got_b    # the published file is whole: the one b wrote last


Point = collections.namedtuple("Point", ["x", "label"])


def _objects(items):
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def test_strings_bytes_and_nested_structures_round_trip(tmp_path, small_records):
    rows = [
        {"t": (torch.arange(i, dtype=torch.int16), Point(torch.tensor(i / 3.0, dtype=torch.float64), "é" * i)),
         "words": np.array(["a", "bc", str(i)]), "raw": bytes([0, 255, i, 0]),
         "flags": [torch.tensor(i % 2 == 0), torch.zeros(0, 3)], "blobs": _objects([bytes([i, 0]), b""])}
        for i in range(7)]
    path = str(tmp_path / "c")
    writer = cache_file.CacheWriter(cache_path(path, ""), ["X"])
    writer.add(rows)
    writer.publish()
    reader = cache_file.open_cache(cache_path(path, ""), ["X"])
    back = [e for r in range(2) for e in reader.read(r).elements()]
    assert all_same(rows, back)
    assert type(back[3]["t"][1]).__name__ == "Point" and back[3]["t"][1].label == "ééé"
    assert back[5]["raw"] == bytes([0, 255, 5, 0]) and back[5]["words"].tolist() == ["a", "bc", "5"]
    assert back[6]["blobs"].dtype == object and back[6]["blobs"].tolist() == [bytes([6, 0]), b""]


def test_stacked_records_read_back_as_index_blocks_of_the_same_elements():
    elements = [(torch.tensor([i, i + 1]), np.str_(f"s{i}")) for i in range(5)]
    block = records.decode_record(records.encode_elements(elements))
    assert type(block).__name__ == "IndexBlock" and all_same(elements, block.elements())


def test_reading_streams_record_by_record(tmp_path, small_records, monkeypatch):
    name = str(tmp_path / "c")
    list(Dataset.range(40).cache(name))
    decoded = []
    real = cache_file.decode_record
    monkeypatch.setattr(cache_file, "decode_record", lambda payload: decoded.append(1) or real(payload))
    it = iter(Dataset.range(40).cache(name))
    assert [int(next(it)) for _ in range(5)] == [0, 1, 2, 3, 4]
    assert len(decoded) == 2          # 2 of its 10 records were read, not the whole file
    assert [int(v) for v in it] == list(range(5, 40)) and len(decoded) == 10


def test_resume_while_reading_continues_at_the_same_element(tmp_path, small_records):
    name = str(tmp_path / "c")
    f = Counted()

    def pipeline():
        return Dataset.range(30).map(lambda x: f(x)["x"]).shuffle(30, seed=1).cache(name).batch(3)
    full = [v.tolist() for v in pipeline()]   # the first pass writes the file
    f.calls = 0
    for stop in (0, 1, 4, 9, 10):
        it = iter(pipeline())
        [next(it) for _ in range(stop)]
        state = json.loads(json.dumps(it.state_dict()))
        again = iter(pipeline())
        again.load_state_dict(state)
        assert [v.tolist() for v in again] == full[stop:]
    assert f.calls == 0


_CHILD = textwrap.dedent("""
    import json, os, sys, torch
    sys.path.insert(0, {src!r})
    from distrib.data import Dataset
    from distrib.data.caching import cache_file
    cache_file.RECORD_ELEMENTS = 4
    ds = Dataset.range(25).map(lambda x: x * x).shuffle(8, seed=5).cache({name!r}).batch(4)
    for _ in range({full_passes}):
        list(ds)
    it = iter(ds)
    for _ in range({stop}):
        next(it)
    print(json.dumps(it.state_dict()))
    sys.stdout.flush()
    os._exit(0)    # dies mid-pass: its temporary file stays behind, as after a SIGKILL
""")


def _run_child(tmp_path, **values):
    """`_CHILD` as a program of its own: a fork of the harness's preloaded server where exact."""
    script = tmp_path / "program" / "child.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(_CHILD.format(src=os.path.abspath(SRC), **values))
    child = run_python([script], timeout=100)
    assert child.returncode == 0, child.stderr[-2000:]
    return child


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stop", [0, 3, 6])
def test_resume_while_writing_in_a_fresh_process(tmp_path, small_records, stop):
    name = str(tmp_path / "c")
    expected = [v.tolist() for v in Dataset.range(25).map(lambda x: x * x).shuffle(8, seed=5).batch(4)]
    child = _run_child(tmp_path, name=name, stop=stop, full_passes=0)
    state = json.loads(child.stdout.strip().splitlines()[-1])
    assert not os.path.exists(cache_path(name, "")) and len(leftovers(tmp_path)) == 1
    calls = []
    ds = Dataset.range(25).map(lambda x: calls.append(1) or x * x).shuffle(8, seed=5).cache(name).batch(4)
    it = iter(ds)
    it.load_state_dict(state)
    assert [v.tolist() for v in it] == expected[stop:]
    assert os.path.exists(cache_path(name, ""))
    calls.clear()
    assert [v.tolist() for v in ds] == expected and calls == []   # the file holds the whole pass


def test_tfrecord_bytes_are_cached_byte_for_byte(tmp_path, small_records):
    import distrib

    path = str(tmp_path / "r.tfrecord")
    payloads = [bytes([i, 0, 255, 128]) * i for i in range(9)]   # not UTF-8, empty, trailing NULs
    with distrib.io.TFRecordWriter(path) as writer:
        for p in payloads:
            writer.write(p)
    ds = distrib.data.TFRecordDataset(path).cache(str(tmp_path / "c"))
    assert list(ds) == payloads
    os.unlink(path)               # the second pass reads only the cache
    assert list(ds) == payloads and all(type(v) is bytes for v in ds)


def test_a_restored_reader_rebuilds_a_deleted_file_from_the_pass_that_filled_it(tmp_path, small_records):
    name = str(tmp_path / "c")
    ds = Dataset.range(12).shuffle(12, seed=4).cache(name)
    full = [int(v) for v in ds]
    it = iter(ds)
    [next(it) for _ in range(5)]
    state = json.loads(json.dumps(it.state_dict()))
    os.unlink(cache_path(name, ""))
    again = iter(Dataset.range(12).shuffle(12, seed=4).cache(name))
    again.load_state_dict(state)
    assert [int(v) for v in again] == full[5:] and os.path.exists(cache_path(name, ""))


@pytest.mark.parametrize("payload", [
    os.urandom(300),
    b"\xff\xff\xff\xff" + b"{}",
    records.encode_elements([torch.arange(3)])[:40],
    (lambda head: len(head).to_bytes(4, "little") + head + records.encode_elements([torch.arange(3)])[
        4 + int.from_bytes(records.encode_elements([torch.arange(3)])[:4], "little"):])(
        json.dumps({"n": 1, "stacked": True, "tree": {"k": "U", "shape": [1 << 40]}}).encode()),
])
def test_a_forged_record_with_a_valid_checksum_is_one_error(tmp_path, payload):
    """CRCs only catch accidents: a record built to pass them still never decodes into a crash."""
    path = cache_path(str(tmp_path / "c"), "")
    frame = cache_file._FRAME.pack(len(payload), cache_file._masked_crc(payload))
    index = json.dumps({"format": 1, "pipeline": ["CacheDataset", "RangeDataset"][1:],
                        "records": [[len(cache_file.MAGIC), len(payload), 1]]}).encode()
    with open(path, "wb") as h:
        h.write(cache_file.MAGIC + frame + payload + index + len(index).to_bytes(8, "little") + cache_file.END)
    with pytest.raises(CacheFileError, match=f"{path} is damaged at byte {len(cache_file.MAGIC)}"):
        list(Dataset.range(3).cache(str(tmp_path / "c")))


@pytest.mark.timeout(120)
def test_resume_while_reading_in_a_fresh_process(tmp_path, small_records):
    name = str(tmp_path / "c")
    expected = [v.tolist() for v in Dataset.range(25).map(lambda x: x * x).shuffle(8, seed=5).batch(4)]
    child = _run_child(tmp_path, name=name, stop=3, full_passes=1)
    state = json.loads(child.stdout.strip().splitlines()[-1])
    calls = []
    it = iter(Dataset.range(25).map(lambda x: calls.append(1) or x * x).shuffle(8, seed=5).cache(name).batch(4))
    it.load_state_dict(state)
    assert [v.tolist() for v in it] == expected[3:] and calls == []   # read from the file, at element 12
