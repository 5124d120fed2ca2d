"""Forged checkpoint manifests: each is a named CorruptCheckpointError and the older checkpoint wins."""
from __future__ import annotations

import hashlib
import json
import os
import warnings

import pytest
import torch

import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.checkpoint.files import storage
from distrib.checkpoint.discovery import latest_checkpoint
from distrib.checkpoint.files.storage import CheckpointWarning, CorruptCheckpointError

pytestmark = pytest.mark.timeout(120)


def _commit(path, payload=None):
    if payload is None:
        from distrib.checkpoint.files.format import dumps_state

        payload = dumps_state({"x": torch.zeros(2)})  # a real state: latest_checkpoint parses the newest
    with storage.AtomicDirectory(str(path), info={"step": 1}) as d:
        d.write_bytes("state.safetensors", payload)
    return str(path)


def _forge(path, manifest_text: bytes) -> None:
    """Replace the manifest and its COMPLETE checksum, as a writer of the directory could."""
    with open(os.path.join(path, storage.MANIFEST_NAME), "wb") as f:
        f.write(manifest_text)
    with open(os.path.join(path, storage.MARKER_NAME), "w") as f:
        f.write(hashlib.sha256(manifest_text).hexdigest())


def _files_manifest(files) -> bytes:
    return json.dumps({"format": "distrib.checkpoint", "version": 1, "created": 1.0,
                       "files": files, "info": {}}).encode()


def _entry(data: bytes, size=None):
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data) if size is None else size}


def _forgeries(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file").write_bytes(b"outside secret")
    hostname = open("/etc/hostname", "rb").read() if os.path.exists("/etc/hostname") else b""
    return {
        "absolute": _files_manifest({"/etc/hostname": _entry(hostname)}),
        "traversal": _files_manifest({"../../outside/file": _entry(b"outside secret")}),
        "dev_zero": _files_manifest({"/dev/zero": _entry(b"", size=1 << 40)}),
        "not_json": b"{\"format\": ",
        "a_list": b"[1, 2, 3]",
        "no_files": json.dumps({"format": "distrib.checkpoint"}).encode(),
        "files_a_list": json.dumps({"format": "distrib.checkpoint", "files": ["state.safetensors"]}).encode(),
        "entry_a_string": _files_manifest({"state.safetensors": "abc"}),
        "size_a_string": _files_manifest({"state.safetensors": {"sha256": "0" * 64, "size": "11"}}),
        "deep": b"[" * 100_000 + b"]" * 100_000,
        "created_a_dict": json.dumps({"format": "distrib.checkpoint", "files": {},
                                      "created": {"x": 1}}).encode(),
    }


@pytest.mark.parametrize("kind", ["absolute", "traversal", "dev_zero", "not_json", "a_list", "no_files",
                                  "files_a_list", "entry_a_string", "size_a_string", "deep",
                                  "created_a_dict"])
def test_forged_manifest_is_skipped_and_the_older_checkpoint_wins(tmp_path, kind):
    directory = tmp_path / "ckpts"
    older = _commit(directory / "ckpt-1")
    newest = _commit(directory / "ckpt-2")
    _forge(newest, _forgeries(tmp_path)[kind])
    with pytest.raises(CorruptCheckpointError, match="ckpt-2"):
        storage.verify(newest)
    with pytest.warns(CheckpointWarning, match="ckpt-2"):
        assert latest_checkpoint(str(directory)) == older


def test_symlinked_file_inside_a_checkpoint_is_refused(tmp_path):
    directory = tmp_path / "ckpts"
    older = _commit(directory / "ckpt-1")
    newest = _commit(directory / "ckpt-2")
    target = os.path.join(newest, "state.safetensors")
    os.remove(target)
    os.symlink("/dev/zero", target)
    with pytest.raises(CorruptCheckpointError, match="leaves the checkpoint|not a regular file"):
        storage.verify(newest)
    with pytest.warns(CheckpointWarning, match="ckpt-2"):
        assert latest_checkpoint(str(directory)) == older


def test_checkpoint_that_is_a_link_out_of_the_directory_is_refused(tmp_path):
    directory = tmp_path / "ckpts"
    older = _commit(directory / "ckpt-1")
    elsewhere = _commit(tmp_path / "elsewhere" / "ckpt-9")
    os.symlink(elsewhere, directory / "ckpt-2")
    with pytest.raises(CorruptCheckpointError, match="link that leaves its directory"):
        storage.verify(str(directory / "ckpt-2"))
    with pytest.warns(CheckpointWarning, match="ckpt-2"):
        assert latest_checkpoint(str(directory)) == older


def test_file_longer_than_its_manifest_size_is_not_read_past_it(tmp_path):
    path = _commit(tmp_path / "ckpt-1", b"0123456789")
    with open(os.path.join(path, "state.safetensors"), "ab") as f:
        f.write(b"x" * 1_000_000)
    with pytest.raises(CorruptCheckpointError, match=r"\(1000010 bytes, manifest says 10\)"):
        storage.verify(path)  # the size is known before a byte is read


def test_backup_and_restore_resumes_from_the_older_backup_past_a_forged_one(tmp_path):
    backup = str(tmp_path / "backup")

    def model():
        torch.manual_seed(0)
        m = distrib.Model(torch.nn.Linear(3, 1))
        m.compile(optimizer="sgd", loss="mse")
        return m

    x = torch.arange(48.0).reshape(16, 3) / 48
    y = x.sum(dim=1, keepdim=True)
    first = model()
    first.fit(x, y, batch_size=4, epochs=2, verbose=0,
              callbacks=[BackupAndRestore(backup, save_freq=2, delete_checkpoint=False,
                                          save_before_preemption=False)])
    names = sorted(os.listdir(backup), key=lambda n: int(n.rsplit("-", 1)[1]) if "-" in n else -1)
    numbered = [n for n in names if n.startswith("backup-")]
    assert len(numbered) >= 2
    newest, older = numbered[-1], numbered[-2]
    _forge(os.path.join(backup, newest), _files_manifest({"../../outside/file": _entry(b"x")}))
    resumed = BackupAndRestore(backup, save_freq=2, delete_checkpoint=False, save_before_preemption=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model().fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[resumed])
    assert resumed.restored_from == os.path.join(backup, older)
    assert any(issubclass(w.category, CheckpointWarning) and newest in str(w.message) for w in caught)
