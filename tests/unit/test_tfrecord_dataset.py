"""`distrib.data.TFRecordDataset` against TensorFlow 2.21's reading of the same files.

Elements are ``bytes`` scalars (TF's scalar tf.string) equal to TF's records; the
file order with and without ``num_parallel_reads`` is TF's; batches of records parse
with ``parse_example``; an iterator restored from its JSON state mid-file continues
with the next record (plain and GZIP); FILE sharding gives each worker its own files;
memory stays bounded on a large file (the reader streams).
"""
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

import distrib
from distrib import io as dio
from distrib.data import AutoShardPolicy, Dataset, TFRecordDataset
from distrib.data.distribution.sharding import Sharding, shard

REF_DIR = Path(__file__).resolve().parents[1] / "data" / "tf_reference" / "tfrecord_io"
REF = json.loads((REF_DIR / "tfrecord_io.json").read_text())
RECORDS = [bytes.fromhex(r) for r in REF["records"]]
FILES = {None: "examples.tfrecord", "GZIP": "examples.tfrecord.gz", "ZLIB": "examples.tfrecord.zz"}
PARTS = sorted(str(p) for p in (REF_DIR / "parts").glob("part-*.tfrecord"))


@pytest.mark.parametrize("compression", list(FILES))
def test_elements_are_tf_records_as_bytes_scalars(compression):
    ds = TFRecordDataset(str(REF_DIR / FILES[compression]), compression_type=compression)
    assert ds.element_spec == distrib.data.TensorSpec((), distrib.data.STRING)
    got = list(ds)
    assert all(type(r) is bytes for r in got)
    assert got == RECORDS


@pytest.mark.parametrize("reads", [None, 2, 3])
def test_file_order_is_tf_order_with_and_without_parallel_reads(reads):
    assert [r.decode() for r in TFRecordDataset(PARTS, num_parallel_reads=reads)] == REF["parallel_reads"][f"list/{reads}"]
    names = Dataset.list_files(str(REF_DIR / "parts" / "part-*.tfrecord"), shuffle=False)
    assert [r.decode() for r in TFRecordDataset(names, num_parallel_reads=reads)] == \
        REF["parallel_reads"][f"list_files/{reads}"]
    slices = Dataset.from_tensor_slices(PARTS)
    assert [r.decode() for r in TFRecordDataset(slices, num_parallel_reads=reads)] == REF["parallel_reads"][f"list/{reads}"]


def test_a_batch_of_records_is_an_object_array_that_parse_example_reads_as_tf():
    ds = TFRecordDataset(str(REF_DIR / FILES[None])).batch(4)
    first = next(iter(ds))
    assert isinstance(first, np.ndarray) and first.dtype == object and first.tolist() == RECORDS[:4]
    spec = {"vec": dio.FixedLenFeature([3], torch.float32), "tags": dio.VarLenFeature(distrib.data.STRING)}
    parsed = ds.map(lambda batch: dio.parse_example(batch, spec))
    batches = list(parsed)
    want = REF["parse"]["dense"]["batch"]["vec"]["values"]
    assert torch.cat([b["vec"] for b in batches]).reshape(-1).tolist() == want
    assert [b["tags"].dense_shape.tolist() for b in batches] == [[4, 3], [2, 1]]  # examples hold i % 4 tags


def test_map_parse_and_decode_jpeg_over_a_written_file(tmp_path):
    jpeg = dio.read_file(REF_DIR / "rgb_q95_444.jpg")
    path = tmp_path / "images.tfrecord"
    with dio.TFRecordWriter(path, "GZIP") as writer:
        for label in range(3):
            writer.write(dio.Example(features=dio.Features(feature={
                "image": dio.Feature(bytes_list=dio.BytesList(value=[jpeg])),
                "label": dio.Feature(int64_list=dio.Int64List(value=[label]))})).SerializeToString())
    spec = {"image": dio.FixedLenFeature([], distrib.data.STRING), "label": dio.FixedLenFeature([], torch.int64)}

    def decode(record):
        example = dio.parse_single_example(record, spec)
        return dio.decode_jpeg(example["image"], channels=3), example["label"]

    images, labels = next(iter(TFRecordDataset([str(path)], compression_type="GZIP").map(decode).batch(3)))
    assert images.shape == (3, 24, 32, 3) and labels.tolist() == [0, 1, 2]
    assert torch.equal(images[2], dio.decode_jpeg(jpeg))


@pytest.mark.parametrize("compression,reads", [(None, None), ("GZIP", None), (None, 2)])
def test_an_iterator_restored_mid_file_continues_with_the_next_record(tmp_path, compression, reads):
    paths = []
    for f in range(2):
        path = tmp_path / f"f{f}.tfrecord"
        with dio.TFRecordWriter(path, compression) as writer:
            for j in range(7):
                writer.write(f"{f}-{j}".encode() * (j + 1))
        paths.append(str(path))
    ds = TFRecordDataset(paths, compression_type=compression, num_parallel_reads=reads)
    everything = list(ds)
    for taken in (1, 3, 9):
        it = iter(ds)
        head = [next(it) for _ in range(taken)]
        state = json.loads(json.dumps(it.state_dict()))  # JSON, as checkpoints store it
        fresh = iter(ds)
        fresh.load_state_dict(state)
        assert head + list(fresh) == everything


def test_the_iterator_state_names_the_file_and_the_next_record_offset(tmp_path):
    ds = TFRecordDataset(str(REF_DIR / FILES[None]))
    it = iter(ds)
    next(it), next(it)
    inner = it.state_dict()["root"]
    assert inner["file"] == 0 and inner["inner"]["records"] == 2
    assert inner["inner"]["offset"] == sum(16 + len(r) for r in RECORDS[:2])


def test_reading_a_large_file_streams(tmp_path):
    path = tmp_path / "large.tfrecord"
    record = bytes(range(256)) * 16
    with dio.TFRecordWriter(path) as writer:
        for _ in range(6000):  # ~25 MB
            writer.write(record)
    tracemalloc.start()
    try:
        it = iter(TFRecordDataset(str(path)))
        assert all(next(it) == record for _ in range(300))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak


def test_file_sharding_gives_each_worker_its_own_files():
    ds = TFRecordDataset(PARTS).batch(2)
    for policy in (AutoShardPolicy.FILE, AutoShardPolicy.AUTO):
        options = distrib.data.Options()
        options.distribute.auto_shard_policy = policy
        for worker in range(2):
            mine, how = shard(ds.with_options(options), num_workers=2, worker=worker)
            assert how is Sharding.FILE
            got = [r.decode() for batch in mine for r in batch]
            want = [r for p in PARTS[worker::2] for r in
                    REF["parallel_reads"]["list/None"] if r.startswith(f"part{Path(p).stem.split('-')[1]}-")]
            assert got == want
    parallel, how = shard(TFRecordDataset(PARTS, num_parallel_reads=2), num_workers=2, worker=1)
    assert how is Sharding.FILE and sorted(r.decode()[:5] for r in parallel) == ["part1"] * 5 + ["part3"] * 4


def test_a_damaged_file_in_a_pipeline_is_one_data_loss_line(tmp_path):
    data = bytearray((REF_DIR / FILES[None]).read_bytes())
    data[300] ^= 1
    (tmp_path / "bad.tfrecord").write_bytes(bytes(data))
    with pytest.raises(dio.DataLossError, match=r"bad\.tfrecord"):
        list(TFRecordDataset([str(REF_DIR / FILES[None]), str(tmp_path / "bad.tfrecord")]).batch(4))


def test_binary_records_stay_bytes_through_the_pipeline_and_its_saved_states(tmp_path):
    records = [b"\xff\x00a", b"b", b"\x80cc", b"", b"e"]
    with dio.TFRecordWriter(tmp_path / "b.tfrecord") as writer:
        for r in records:
            writer.write(r)
    ds = TFRecordDataset(str(tmp_path / "b.tfrecord"))
    assert list(ds.batch(2).unbatch()) == records
    assert sorted(r for b in ds.shuffle(5, seed=1).batch(2) for r in b.tolist()) == sorted(records)
    assert list(ds.map(lambda r: r[:1])) == [r[:1] for r in records]
    padded = list(ds.map(lambda r: np.array([r, r], dtype=object)).padded_batch(2, padded_shapes=[3]))
    assert padded[0].dtype == object and padded[0].tolist() == [[b"\xff\x00a"] * 2 + [b""], [b"b"] * 2 + [b""]]
    scanned = ds.scan(b"", lambda state, r: (state + r, state + r))  # a bytes state saved as JSON
    it = iter(scanned)
    next(it), next(it)
    fresh = iter(scanned)
    fresh.load_state_dict(json.loads(json.dumps(it.state_dict())))
    assert list(fresh) == [b"\xff\x00ab\x80cc", b"\xff\x00ab\x80cc", b"\xff\x00ab\x80cce"]


def test_interleave_of_tfrecord_dataset_over_file_names_is_tf_order_and_a_file_source():
    names = Dataset.from_tensor_slices(PARTS)
    ds = names.interleave(TFRecordDataset, cycle_length=2, block_length=1)
    assert [r.decode() for r in ds] == REF["parallel_reads"]["list/2"]
    mine, how = shard(ds, num_workers=2, worker=0)
    assert how is Sharding.FILE and {r.decode()[:5] for r in mine} == {"part0", "part2"}
