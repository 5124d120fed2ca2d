"""TFRecord files in distrib.io against files TensorFlow 2.21 wrote and read.

TF wrote the same Examples plain, GZIP and ZLIB, read files distrib wrote, and read
damaged copies (tests/tf_reference/generate_tfrecord_io.py). distrib must read TF's
records byte for byte, write TF's exact bytes, and turn every kind of damage into one
`DataLossError` line naming the file and the offset TF names; a forged length is
never allocated.
"""
import gzip
import json
import re
import tracemalloc
import zlib
from pathlib import Path

import pytest

import distrib
from distrib import io as dio
from distrib.io.record_format import frame, masked_crc
from distrib.io.records import RecordReader

REF_DIR = Path(__file__).resolve().parents[1] / "data" / "tf_reference" / "tfrecord_io"
REF = json.loads((REF_DIR / "tfrecord_io.json").read_text())
RECORDS = [bytes.fromhex(r) for r in REF["records"]]
FILES = {"NONE": "examples.tfrecord", "GZIP": "examples.tfrecord.gz", "ZLIB": "examples.tfrecord.zz"}
SUFFIX = {"NONE": "", "GZIP": ".gz", "ZLIB": ".zz"}


def _read(path, compression=None):
    return list(dio.tf_record_iterator(str(path), compression))


@pytest.mark.parametrize("compression", sorted(FILES))
def test_records_tf_wrote_read_as_tf_read_them(compression):
    assert [bytes.fromhex(r) for r in REF["read"][compression]["records"]] == RECORDS
    options = None if compression == "NONE" else compression
    assert _read(REF_DIR / FILES[compression], options) == RECORDS


def test_the_writer_writes_tf_exact_bytes(tmp_path):
    with dio.TFRecordWriter(tmp_path / "mine.tfrecord") as writer:
        for record in RECORDS:
            writer.write(record)
    assert (tmp_path / "mine.tfrecord").read_bytes() == (REF_DIR / "examples.tfrecord").read_bytes()


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_writes_hold_tf_plain_bytes_and_read_back(tmp_path, compression):
    path = tmp_path / f"mine{SUFFIX[compression]}"
    options = dio.TFRecordOptions(compression_type=compression, compression_level=9)
    with dio.TFRecordWriter(path, options) as writer:
        for i, record in enumerate(RECORDS):
            writer.write(record)
            if i == 1:
                writer.flush()
    raw = path.read_bytes()
    plain = gzip.decompress(raw) if compression == "GZIP" else zlib.decompress(raw)
    assert plain == (REF_DIR / "examples.tfrecord").read_bytes()
    assert _read(path, compression) == RECORDS


@pytest.mark.parametrize("compression", sorted(FILES))
def test_tf_reads_the_files_distrib_wrote_as_distrib_does(compression):
    path = REF_DIR / f"written_by_distrib.tfrecord{SUFFIX[compression]}"
    tf_read = REF["written_by_distrib"][compression]
    assert "error" not in tf_read and len(tf_read["records"]) == len(RECORDS)
    assert _read(path, None if compression == "NONE" else compression) == [bytes.fromhex(r) for r in tf_read["records"]]


def _damaged_copy(tmp_path, how):
    data = (REF_DIR / "examples.tfrecord").read_bytes()
    what, arg = how
    b = bytearray(data)
    if what == "flip":
        b[arg] ^= 0x40
    elif what == "cut":
        b = b[:arg]
    elif what == "keep_first_plus":
        b = b[:16 + int.from_bytes(data[:8], "little") + arg]
    elif what == "long_length":
        length = arg.to_bytes(8, "little")
        b = bytearray(length + masked_crc(length).to_bytes(4, "little") + b"\0" * 8)
    elif what == "garbage":
        import hashlib

        b = bytearray(hashlib.sha256(b"garbage").digest() * (arg // 32))
    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(bytes(b))
    return path


@pytest.mark.parametrize("name", sorted(REF["damage"]))
def test_damage_is_one_data_loss_line_naming_the_file_and_tf_offset(tmp_path, name):
    tf_answer = REF["damage"][name]
    path = _damaged_copy(tmp_path, tf_answer["how"])
    got = []
    with pytest.raises(dio.DataLossError) as info:
        for record in dio.tf_record_iterator(str(path)):
            got.append(record)
    line = str(info.value)
    assert "\n" not in line and str(path) in line
    assert isinstance(info.value, distrib.DistribError)
    assert got == [bytes.fromhex(r) for r in tf_answer["records"]]
    if "error" in tf_answer:
        assert tf_answer["error"] == "DataLossError"
        offset = re.search(r"record at (\d+)", tf_answer["message"]).group(1)
        assert f"byte offset {offset} " in line, (line, tf_answer["message"])
    else:  # TF 2.21 ends silently at a header cut short; distrib says the file is truncated
        assert name == "truncate_inside_header" and "ends inside a record header" in line


def test_a_forged_huge_length_is_checked_before_anything_is_allocated(tmp_path):
    length = (1 << 40).to_bytes(8, "little")
    forged = length + masked_crc(length).to_bytes(4, "little") + b"\0" * 64
    (tmp_path / "huge.tfrecord").write_bytes(forged)
    (tmp_path / "huge.tfrecord.gz").write_bytes(gzip.compress(forged))
    for name, compression in (("huge.tfrecord", None), ("huge.tfrecord.gz", "GZIP")):
        tracemalloc.start()
        try:
            with pytest.raises(dio.DataLossError, match=r"byte offset 0 of .*huge\.tfrecord"):
                _read(tmp_path / name, compression)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 8 << 20, peak  # a few buffers, never the claimed terabyte


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_damaged_or_foreign_compressed_streams_are_data_loss(tmp_path, compression):
    good = (REF_DIR / FILES[compression]).read_bytes()
    damaged = bytearray(good)
    damaged[len(good) // 2] ^= 0xFF
    cases = {"flipped": bytes(damaged), "cut": good[:-9], "plain": (REF_DIR / "examples.tfrecord").read_bytes()}
    for what, data in cases.items():
        path = tmp_path / f"{what}{SUFFIX[compression]}"
        path.write_bytes(data)
        with pytest.raises(dio.DataLossError) as info:
            _read(path, compression)
        assert str(path) in str(info.value) and "uncompressed byte offset" in str(info.value), what


def test_a_damaged_record_in_the_middle_comes_after_the_good_ones(tmp_path):
    data = b"".join(frame(r) for r in RECORDS)
    bad = bytearray(data)
    start = sum(16 + len(r) for r in RECORDS[:3])
    bad[start + 12 + 5] ^= 1
    (tmp_path / "mid.tfrecord").write_bytes(bytes(bad))
    reader = RecordReader(str(tmp_path / "mid.tfrecord"))
    assert reader.read(3) == RECORDS[:3] and reader.offset == start
    with pytest.raises(dio.DataLossError, match=f"byte offset {start + 12} .*starting at byte {start}"):
        reader.read(10)


def test_unknown_compression_and_missing_files_are_named(tmp_path):
    with pytest.raises(ValueError, match="compression_type must be None, '', 'GZIP' or 'ZLIB', got 'LZ4'"):
        dio.TFRecordWriter(tmp_path / "x", "LZ4")
    with pytest.raises(FileNotFoundError, match="nope.tfrecord"):
        _read(tmp_path / "nope.tfrecord")
    with pytest.raises(TypeError, match="takes bytes"):
        with dio.TFRecordWriter(tmp_path / "x") as writer:
            writer.write(3)


@pytest.mark.parametrize("compression", sorted(FILES))
def test_random_damage_only_ever_yields_good_records_then_one_data_loss_error(tmp_path, compression):
    import random

    good = (REF_DIR / FILES[compression]).read_bytes()
    options = None if compression == "NONE" else compression
    rng = random.Random(48)
    for trial in range(60):
        data = bytearray(good)
        what = trial % 3
        if what == 0:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif what == 1:
            data = data[:rng.randrange(1, len(data))]
        else:
            at = rng.randrange(len(data))
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        path = tmp_path / f"t{trial}"
        path.write_bytes(bytes(data))
        got = []
        try:
            for record in dio.tf_record_iterator(str(path), options):
                got.append(record)
        except dio.DataLossError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc)
        assert got == RECORDS[:len(got)], (compression, trial)  # never a wrong record
