"""`latest_checkpoint` never returns a checkpoint deleted while it was being checked (issue 52, item 3).

A file deleted while it is open still reads to the end, so a verification
in progress succeeds on a checkpoint that no longer exists; another process's
``max_to_keep`` rotation does exactly that. The deletion is injected at the
two moments it can happen: between the listing and the check, and in the
middle of the check (after the state file was opened and hashed).
"""
import shutil
import warnings

import pytest
import torch

import distrib
from distrib.checkpoint import CheckpointWarning, discovery
from distrib.checkpoint.files import state_file as state_file_module

pytestmark = pytest.mark.timeout(120)


def _two(directory):
    ckpt = distrib.train.Checkpoint(w=torch.arange(4.0))
    ckpt.save(str(directory / "ckpt"))
    ckpt.save(str(directory / "ckpt"))
    return str(directory / "ckpt-1"), str(directory / "ckpt-2")


def _latest(directory):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = distrib.train.latest_checkpoint(str(directory))
    return found, [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]


def test_a_checkpoint_deleted_while_its_file_is_verified_is_not_returned(tmp_path, monkeypatch):
    older, newest = _two(tmp_path)
    real_verify = state_file_module.StateFile.verify

    def verify_then_delete(self):  # the handle is open: the deleted file still hashes right
        real_verify(self)
        if self.path == newest:
            shutil.rmtree(newest)
    monkeypatch.setattr(state_file_module.StateFile, "verify", verify_then_delete)
    found, messages = _latest(tmp_path)
    assert found == older
    assert any("ckpt-2" in m and "deleted or replaced while it was checked" in m for m in messages), messages


def test_a_checkpoint_deleted_between_the_listing_and_the_check_is_not_returned(tmp_path, monkeypatch):
    older, newest = _two(tmp_path)
    real_list = discovery.numbered_checkpoints

    def list_then_delete(*args, **kwargs):
        found = real_list(*args, **kwargs)
        shutil.rmtree(newest, ignore_errors=True)
        return found
    monkeypatch.setattr(discovery, "numbered_checkpoints", list_then_delete)
    found, messages = _latest(tmp_path)
    assert found == older
    assert any("ckpt-2" in m for m in messages), messages


def test_a_checkpoint_replaced_while_it_is_checked_is_not_returned(tmp_path, monkeypatch):
    """Deleted and written again under the same name (a restarted job's first save): the check saw the old one."""
    older, newest = _two(tmp_path)
    real_verify = state_file_module.StateFile.verify
    done = []

    def verify_then_replace(self):
        real_verify(self)
        if self.path == newest and not done:
            done.append(1)
            shutil.rmtree(newest)
            distrib.train.Checkpoint(w=torch.zeros(4)).write(newest)
    monkeypatch.setattr(state_file_module.StateFile, "verify", verify_then_replace)
    found, messages = _latest(tmp_path)
    assert found == older
    assert any("ckpt-2" in m and "deleted or replaced while it was checked" in m for m in messages), messages
