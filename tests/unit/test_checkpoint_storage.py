"""Atomic, verified checkpoint directories (local paths and fsspec URLs)."""
import os
import uuid

import pytest

from distrib.strategies.checkpoint_role import CheckpointRole
from distrib.comm.collective import LocalCollective
from distrib.checkpoint.files import storage
from distrib.checkpoint.files.storage import AtomicDirectory, CorruptCheckpointError


@pytest.fixture(params=["local", "file", "memory"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "ckpts")
    if request.param == "file":
        return f"file://{tmp_path}/ckpts"
    return f"memory://storage-test-{uuid.uuid4().hex}"


def _write(path, payload=b"payload" * 50, info=None):
    with AtomicDirectory(path, info) as d:
        d.write_bytes("data.bin", payload)
        d.write_bytes("extra.json", b"{}")
    return path


def test_commit_makes_a_verified_directory(root):
    path = _write(storage.join(root, "ckpt-1"), info={"step": 7})
    assert storage.is_complete(path)
    manifest = storage.verify(path)
    assert manifest["info"] == {"step": 7}
    assert set(manifest["files"]) == {"data.bin", "extra.json"}
    assert storage.read_verified(path, "data.bin") == b"payload" * 50
    assert storage.list_names(root) == ["ckpt-1"]  # no temporaries left behind


def test_interrupted_write_leaves_nothing_visible(root):
    path = storage.join(root, "ckpt-2")
    with pytest.raises(KeyboardInterrupt):
        with AtomicDirectory(path) as d:
            d.write_bytes("data.bin", b"half")
            raise KeyboardInterrupt
    assert not storage.exists(path)
    assert not storage.is_complete(path)
    assert storage.list_names(root) == []


def test_interrupted_overwrite_keeps_the_old_checkpoint_on_rename_filesystems(tmp_path):
    path = _write(str(tmp_path / "ckpt-1"), b"old")
    with pytest.raises(RuntimeError):
        with AtomicDirectory(path) as d:
            d.write_bytes("data.bin", b"new")
            raise RuntimeError("killed before commit")
    assert storage.read_verified(path, "data.bin") == b"old"


def test_overwrite_replaces_completely(root):
    path = _write(storage.join(root, "ckpt-1"), b"old")
    with AtomicDirectory(path) as d:
        d.write_bytes("other.bin", b"new")
    assert storage.list_names(path) == ["COMPLETE", "MANIFEST.json", "other.bin"]
    assert storage.is_complete(path)


def _local(root, *names):
    return storage.join(root, *names).replace("file://", "")


def test_truncated_file_is_detected(root, tmp_path):
    if root.startswith("memory://"):
        import fsspec

        path = _write(storage.join(root, "ckpt-1"))
        fs, p = fsspec.core.url_to_fs(path)
        fs.pipe_file(p + "/data.bin", (b"payload" * 50)[:-3])
    else:
        path = _write(storage.join(root, "ckpt-1"))
        with open(_local(root, "ckpt-1", "data.bin"), "r+b") as f:
            f.truncate(10)
    assert not storage.is_complete(path)
    with pytest.raises(CorruptCheckpointError, match=r"data\.bin: truncated"):
        storage.verify(path)


def test_flipped_bit_is_detected(tmp_path):
    path = _write(str(tmp_path / "ckpt-1"))
    target = tmp_path / "ckpt-1" / "data.bin"
    data = bytearray(target.read_bytes())
    data[17] ^= 0x04
    target.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match=r"data\.bin: contents do not match the manifest's sha256"):
        storage.verify(path)


def test_missing_marker_and_damaged_manifest_are_detected(tmp_path):
    path = _write(str(tmp_path / "ckpt-1"))
    (tmp_path / "ckpt-1" / "MANIFEST.json").write_text('{"format": "distrib.checkpoint", "files": {}}')
    with pytest.raises(CorruptCheckpointError, match="does not match its COMPLETE checksum"):
        storage.verify(path)
    os.remove(tmp_path / "ckpt-1" / "COMPLETE")
    with pytest.raises(CorruptCheckpointError, match="no COMPLETE marker"):
        storage.verify(path)


def test_remove_checkpoint_never_leaves_a_complete_looking_half(root):
    path = _write(storage.join(root, "ckpt-1"))
    storage.remove_checkpoint(path)
    assert not storage.exists(path)
    assert storage.list_names(root) == []


def test_atomic_write_bytes_replaces(root):
    target = storage.join(root, "index")
    storage.atomic_write_bytes(target, b"one")
    storage.atomic_write_bytes(target, b"two")
    import fsspec

    with fsspec.open(target, "rb") as f:
        assert f.read() == b"two"
    assert storage.list_names(root) == ["index"]


def test_invalid_file_names_are_refused(tmp_path):
    with AtomicDirectory(str(tmp_path / "c")) as d:
        for bad in ("", "a/b", "COMPLETE", "MANIFEST.json", ".hidden"):
            with pytest.raises(ValueError, match="invalid checkpoint file name"):
                d.write_bytes(bad, b"")


def _chief() -> CheckpointRole:
    return CheckpointRole(is_chief=True, num_replicas_in_sync=2, replica_id=0, collective=LocalCollective())


def _worker() -> CheckpointRole:
    return CheckpointRole(is_chief=False, num_replicas_in_sync=2, replica_id=1, collective=LocalCollective(),
                          task_type="worker", task_id=1)


def test_write_path_for_chief_and_worker(tmp_path):
    target = str(tmp_path / "ckpt")
    assert storage.write_path_for(target, _chief()) == target
    private = storage.write_path_for(target, _worker())
    assert private != target and os.path.basename(private) == "ckpt"
    assert "distrib-workertemp-1-" in private and not private.startswith(str(tmp_path))
    _write(private)
    storage.remove_write_path(target, private)
    assert not os.path.exists(os.path.dirname(private))
    with storage.worker_write_path(target, _worker()) as p:
        _write(p)
        assert os.path.isdir(p)
    assert not os.path.exists(os.path.dirname(p))
    assert not os.path.exists(target)
